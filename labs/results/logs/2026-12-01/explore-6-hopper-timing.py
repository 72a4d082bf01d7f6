"""Why does chapter 07's persistent rung time slower under labkit's bench than in the first sweep (625 vs
718 TFLOP/s at 4096^3)? The same launch timed four ways in one run: labkit's bench (read-kernel L2 flush),
bench with a torch-sum flush (the sweep's), bench with the kernel's shared-memory carveout preference at
100%, and no flush with rotated inputs."""
import cupy as cp
import numpy as np
import torch

from labkit.chapters import ch07
from labkit.chapters.ch06 import random_bf16
from labkit.measure.timing import bench

M = N = K = 4096
flops = 2 * M * N * K
sets = [(random_bf16((M, K)), random_bf16((N, K)), cp.empty((M, N), dtype=cp.uint16)) for _ in range(4)]
A, B_t, C = sets[0]
run = ch07.launcher(A, B_t, C, "persistent")
tf = lambda ms: flops / (ms * 1e-3) / 1e12
base = bench(lambda: ch07.cublas_bf16(A, B_t, C))
print(f"cuBLAS {base.median_ms:.4f} ms {tf(base.median_ms):.0f} TFLOP/s")
t = bench(run)
print(f"bench (read flush)            {t.median_ms:.4f} ms {tf(t.median_ms):.0f} TFLOP/s")
buf = torch.empty(120 * 2 ** 20 // 4, device="cuda", dtype=torch.float32).normal_()
sink = torch.empty((), device="cuda")
ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(30)]
for _ in range(3):
    run()
for s, e in ev:
    sink.copy_(buf.sum())
    s.record(); run(); e.record()
ev[-1][1].synchronize()
ms = float(np.median([cp.cuda.get_elapsed_time(s, e) for s, e in ev]))
print(f"torch-sum flush, plain events  {ms:.4f} ms {tf(ms):.0f} TFLOP/s")
launchers = [ch07.launcher(a, b, c, "persistent") for a, b, c in sets]
t = bench(lambda i: launchers[i](), inputs=[(i,) for i in range(4)], flush_l2=False)
print(f"no flush, 4 input sets rotated {t.median_ms:.4f} ms {tf(t.median_ms):.0f} TFLOP/s")
g = ch07.geometry(ch07.rungs()["persistent"].path)
k = ch07._kernel(ch07.rungs()["persistent"].path, "gemm_persistent", ())
try:
    k.preferred_shared_memory_carveout = 100
    t = bench(run)
    print(f"bench, carveout 100%           {t.median_ms:.4f} ms {tf(t.median_ms):.0f} TFLOP/s")
except Exception as e:
    print("carveout:", type(e).__name__, e)
t = bench(run, warmup_ms=200)
print(f"bench, 200 ms warm-up          {t.median_ms:.4f} ms {tf(t.median_ms):.0f} TFLOP/s")
base = bench(lambda: ch07.cublas_bf16(A, B_t, C))
print(f"cuBLAS again {base.median_ms:.4f} ms {tf(base.median_ms):.0f} TFLOP/s")
