#!/usr/bin/env bash
# First H200 call of 2026-12-01: the chapter 05 ladder and its tuning sweep, the new labkit and grader GPU
# tests, a quick smoke run of chapters 01-04's benchmarks, then the chapter 06 sweep with what time is left.
# Run from the project root on the runner:  bash labs/results/logs/2026-12-01/explore-1.sh OUTDIR
set -u
out=${1:?OUTDIR}
mkdir -p "$out/w"
source tools/runner-env.sh
L=labs/results/logs/2026-12-01
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/w/gpu.txt" 2>&1
timeout 245 python3 "$L/sgemm-ladder-sweep.py" "$out/w" > "$out/w/sgemm.log" 2>&1; echo "sgemm rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_labkit.py > "$out/w/labkit-gpu-tests.log" 2>&1; echo "labkit tests rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
timeout 180 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_grading_gpu.py tests/test_grading_adversarial_gpu.py tests/test_grading_throughput_gpu.py -s > "$out/w/grading-gpu-tests.log" 2>&1; echo "grading tests rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
left=$((560 - (SECONDS - start)))
if [ $left -gt 40 ]; then
  timeout $((left / 2)) python3 -m labkit bench --quick > "$out/w/bench-quick.log" 2>&1; echo "bench quick rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
fi
left=$((560 - (SECONDS - start)))
if [ $left -gt 60 ]; then
  timeout $left python3 "$L/gemm-mma-ladder-sweep.py" "$out/w/mma" > "$out/w/mma.log" 2>&1; echo "mma rc=$? $((SECONDS - start)) s" | tee -a "$out/w/summary.txt"
fi
tar czf "$out/explore-1.tgz" -C "$out/w" .
tail -c 3000 "$out/w/sgemm.log"; tail -n 5 "$out/w/labkit-gpu-tests.log" "$out/w/grading-gpu-tests.log"; cat "$out/w/summary.txt"
