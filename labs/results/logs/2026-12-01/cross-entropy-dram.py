"""Chapter 10's fused cross-entropy under Nsight Compute: one launch per build at 4096 x 128256, to read how
many bytes DRAM served (does the second read of each row hit the L2?). Run on a GPU machine from the
repository root:

    ncu --kernel-name ce_fused --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \\
        python3 labs/results/logs/2026-12-01/cross-entropy-dram.py

Builds, in launch order: P0 (the recorded kernel), P2 H1 (prefetch 2, L2 hints), each at one block of 1024
threads per SM.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import cupy as cp  # noqa: E402

from labkit.chapters import ch10  # noqa: E402

N, V = 4096, 128256
x = ch10.random_logits(N, V, 5)
t = cp.asarray(ch10.random_targets(N, V, N // 64, 6))
g, loss, lse, mean = cp.empty_like(x), cp.empty(N, cp.float32), cp.empty(N, cp.float32), cp.empty(1, cp.float32)
sms = cp.cuda.Device().attributes["MultiProcessorCount"]
for name, defines in (("P0", ("-DPREFETCH=0",)), ("P2 H1", ("-DPREFETCH=2", "-DHINTS=1"))):
    run = ch10.launcher(x, t, g, loss, lse, mean, version="fused", threads=1024, blocks=sms, defines=defines)
    run()
    cp.cuda.Device().synchronize()
    print(f"launched {name}", flush=True)
