#!/usr/bin/env bash
# The recordings chapters 01-04 (revised) and 10 (new) wait for, one runner call each, every step packed the
# moment it ends (a call cut short by its limit keeps what finished). Run from the project root on the runner:
#   bash labs/results/logs/2026-12-01/record-01-04-10.sh OUTDIR a     # ch01 notebooks, ch02 in full, ch03 in full
#   bash labs/results/logs/2026-12-01/record-01-04-10.sh OUTDIR b     # ch04 in full, sanitizer log, softmax
#                                                                      # gain over 5 runs, CE sweep
#   bash labs/results/logs/2026-12-01/record-01-04-10.sh OUTDIR c     # ch10 in full (after the sweep's defaults)
# Budget each call at 560 s of the 600 s limit; the step timeouts below add up to less.
set -u
out=${1:?OUTDIR}
part=${2:?part a, b or c}
source tools/runner-env.sh
export LABKIT_PLAIN_PROGRESS=1
L=labs/results/logs/2026-12-01
start=$SECONDS
pack() {   # the files a recording writes, packed after every step
  tar czf "$out/recorded-$1.tgz" labs/0*/*.ipynb labs/10*/*.ipynb labs/results/*.json kernels/0[1-4]* kernels/10* 2>/dev/null
  echo "$1 rc=$2 $((SECONDS - start)) s" | tee -a "$out/summary.txt"
}
step() {   # step NAME TIMEOUT COMMAND...
  local name=$1 t=$2; shift 2
  timeout "$t" "$@" > "$out/$name.log" 2>&1
  pack "$name" $?
}
case $part in
  a)
    step ch01 120 python3 -m labkit gpu-check --chapter 01 --only tests,execute,nbval
    step ch02 170 python3 -m labkit gpu-check --chapter 02
    step ch03 250 python3 -m labkit gpu-check --chapter 03 ;;
  b)
    step ch04 300 python3 -m labkit gpu-check --chapter 04
    step sanitizer 60 python3 "$L/sanitizer-pool.py"
    step softmax-repeat 90 python3 "$L/softmax-passes-repeat.py" "$out"
    step ce-sweep 150 python3 "$L/cross-entropy-sweep.py" "$out" ;;
  c)
    step ch10 540 python3 -m labkit gpu-check --chapter 10 ;;
esac
