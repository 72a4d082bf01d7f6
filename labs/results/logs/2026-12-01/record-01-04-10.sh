#!/usr/bin/env bash
# The recordings chapters 01-04 (revised) and 10 (new) wait for, one runner call each, every step packed the
# moment it ends (a call cut short by its limit keeps what finished). Run from the project root on the runner:
#   bash labs/results/logs/2026-12-01/record-01-04-10.sh OUTDIR a     # ch01 notebooks, ch02 in full, ch03 in full
#   bash labs/results/logs/2026-12-01/record-01-04-10.sh OUTDIR b     # ch04 in full, CE sweep, softmax gain
#                                                                      # over 5 runs, sanitizer log, ch09 attack
#   bash labs/results/logs/2026-12-01/record-01-04-10.sh OUTDIR c     # CE sweep again, ch10 tests, bench, profile
#   bash labs/results/logs/2026-12-01/record-01-04-10.sh OUTDIR d     # ch10 notebooks (after its speed bar is set
#                                                                      # from c's reference), softmax, sanitizer
# Each call keeps to 570 s of the 600 s limit (LIMIT=seconds for less): a step's timeout is cut to what is left, and skipped under 20 s.
set -u
out=${1:?OUTDIR}
part=${2:?part a, b, c or d}
source tools/runner-env.sh
export LABKIT_PLAIN_PROGRESS=1
L=labs/results/logs/2026-12-01
start=$SECONDS
mkdir -p "$out/logs"
pack() {   # the files a recording writes and the logs so far, in one archive (a call returns few files)
  tar czf "$out/recorded.tmp" labs/0*/*.ipynb labs/10*/*.ipynb labs/results/*.json kernels/0[1-4]* kernels/10* \
    -C "$out" logs 2>/dev/null
  mv "$out/recorded.tmp" "$out/recorded.tgz"
  echo "$1 rc=$2 $((SECONDS - start)) s" | tee -a "$out/summary.txt"
}
step() {   # step NAME TIMEOUT COMMAND... (cut to what is left of the call's 570 s, so the last pack runs)
  local name=$1 t=$2; shift 2
  local left=$((${LIMIT:-570} - (SECONDS - start)))
  (( t > left )) && t=$left
  (( t < 20 )) && { echo "$name skipped: $left s left" | tee -a "$out/summary.txt"; return; }
  timeout "$t" "$@" > "$out/logs/$name.log" 2>&1
  pack "$name" $?
}
case $part in
  a)
    step ch01 120 python3 -m labkit gpu-check --chapter 01 --only tests,execute,nbval
    step ch02 170 python3 -m labkit gpu-check --chapter 02
    step ch03 250 python3 -m labkit gpu-check --chapter 03 ;;
  b)
    step ch04 300 python3 -m labkit gpu-check --chapter 04
    step ce-sweep 120 python3 "$L/cross-entropy-sweep.py" "$out/logs"
    step ch03-nbval 60 python3 -m labkit gpu-check --chapter 03 --only nbval    # part a's ch03 ran out here
    step softmax-repeat 90 python3 "$L/softmax-passes-repeat.py" "$out/logs"
    step sanitizer 60 python3 "$L/sanitizer-pool.py"
    step ch09-no-guard 60 python3 -m pytest -q -m gpu tests/test_ch09_grading.py -k no_guard ;;
  c)
    step ce-sweep-2 120 python3 "$L/cross-entropy-sweep.py" "$out/logs"
    step ch10 420 python3 -m labkit gpu-check --chapter 10 --only tests,bench,profile ;;
  d)   # what the device time left allowed: ch10's GPU tests had passed in their own call (ch10-gpu-tests.log)
    step ch10 300 python3 -m labkit gpu-check --chapter 10 --only bench,profile,execute,nbval
    step softmax-repeat 90 python3 "$L/softmax-passes-repeat.py" "$out/logs"
    step sanitizer 60 python3 "$L/sanitizer-pool.py" ;;
esac
