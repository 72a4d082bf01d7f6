#!/usr/bin/env bash
# Fourth H200 call of 2026-12-01: the course-wide GPU tests of the grader (adversarial submissions, batch,
# throughput), the rest of chapter 05's grading tests, then the chapter 07 (Hopper) sweep with what is left.
set -u
out=${1:?OUTDIR}
mkdir -p "$out/w"
source tools/runner-env.sh
start=$SECONDS
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu -rA tests/test_grading_gpu.py tests/test_grading_adversarial_gpu.py tests/test_grading_throughput_gpu.py -s > "$out/w/grading-gpu-tests.log" 2>&1; echo "grading tests rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu -rA tests/test_ch05_grading.py -k "not full_marks and not first_launch" > "$out/w/ch05-grading-gpu-rest.log" 2>&1; echo "ch05 grading rest rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
left=$((555 - (SECONDS - start)))
if [ $left -gt 60 ]; then
  timeout $left python3 labs/results/logs/2026-12-01/gemm-hopper-ladder-sweep.py "$out/w/hopper" > "$out/w/hopper.log" 2>&1; echo "hopper rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
fi
tar czf "$out/explore-4.tgz" -C "$out/w" .
grep -E "passed|failed|FAILED|ERROR" "$out/w/grading-gpu-tests.log" "$out/w/ch05-grading-gpu-rest.log" | tail -20; tail -n 25 "$out/w/hopper.log"; cat "$out/w/summary.txt"
