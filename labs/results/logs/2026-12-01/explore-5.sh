#!/bin/bash
# Chapters 06-07 on the H200 before recording: their GPU tests, a quick benchmark of both, and whether ncu
# knows the warp-stall metrics the profiler now asks for. Run from the repository root on the runner.
source tools/runner-env.sh
export LABKIT_PLAIN_PROGRESS=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt
python3 - > $OUT/ncu-metrics.txt 2>&1 <<'PY'
import subprocess, sys
from labkit.runner.profile import METRICS
out = subprocess.run(["ncu", "--query-metrics", "--chip", "gh100"], capture_output=True, text=True).stdout
for m in METRICS:
    base = m.rsplit(".", 1)[0] if m.count(".") else m
    print(("known   " if base in out else "UNKNOWN ") + m)
PY
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_ch06_gemm.py tests/test_ch07_gemm.py > $OUT/gpu-tests.log 2>&1
echo "gpu tests rc=$?" >> $OUT/gpu-tests.log
timeout 170 python3 -m labkit bench --chapter 06 --chapter 07 --quick --json $OUT/quick.json > $OUT/bench-quick.log 2>&1
echo "bench rc=$?" >> $OUT/bench-quick.log
