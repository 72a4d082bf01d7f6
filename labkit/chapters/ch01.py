"""Chapter 01: the three copy probes, the FMA probe and the mma.sync probe, against cupy.copyto, the fp32
peak and cuBLAS."""
from __future__ import annotations

import numpy as np

from ..measure.checks import GuardedOutput, expect
from ..measure.compile import kernel
from ..measure.device import sm_count
from ..measure import ceilings
from ..measure.timing import Timing, bench

HEADLINE = {"copy": "134217728"}   # the shape the book's plain figures of each op refer to

COPY_SCALAR = "01-roofline/01_copy_scalar.cu"
COPY_VEC128 = "01-roofline/02_copy_vec128.cu"
COPY_VEC128_FLAT = "01-roofline/03_copy_vec128_flat.cu"
FMA_PROBE = "01-roofline/04_fma_probe.cu"
MMA_PROBE = "01-roofline/05_mma_probe.cu"
CHECK_SIZES = [0, 1, 3, 4, 7, 1000, 65537, 1_000_003]   # irregular: empty, tails of 1-3, primes
THREADS = 256


def _copy(path: str, name: str, x, y, align: int, blocks) -> None:
    """Check x and y (fp32, same shape, contiguous, `align`-byte aligned), then launch `name` with
    `blocks(n)` blocks of THREADS threads; nothing to launch for an empty array."""
    import cupy as cp
    expect("x", x, dtype=np.float32, align=align)
    expect("y", y, dtype=np.float32, shape=x.shape, align=align)
    n = x.size
    if n:
        kernel(path, name)((blocks(n),), (THREADS,), (x, y, cp.int64(n)))


def copy_scalar(x, y):
    """y[:] = x[:] with one float per thread."""
    _copy(COPY_SCALAR, "copy_scalar", x, y, 4, lambda n: -(-n // THREADS))


def copy_vec128(x, y, blocks_per_sm: int = 8):
    """y[:] = x[:] with 16-byte vectors, a grid-stride loop and a grid sized to the GPU."""
    _copy(COPY_VEC128, "copy_vec128", x, y, 16,
          lambda n: max(1, min(sm_count() * blocks_per_sm, -(-(n // 4) // THREADS))))


def copy_vec128_flat(x, y):
    """y[:] = x[:] with one 16-byte vector per thread and a grid that covers the data (no loop)."""
    _copy(COPY_VEC128_FLAT, "copy_vec128_flat", x, y, 16,
          lambda n: max(1, -(-(n // 4) // THREADS)))            # at least one block, for a tail-only copy


COPIES = {"copy_scalar": copy_scalar, "copy_vec128": copy_vec128, "copy_vec128_flat": copy_vec128_flat}


def check_copies(ctx):
    import cupy as cp
    for name, fn in COPIES.items():
        for n in CHECK_SIZES:
            x = cp.random.standard_normal(n, dtype=cp.float32)
            out = GuardedOutput((n,), "float32")
            fn(x, out.array)
            ctx.verify(f"{name} n={n}", out, x.get(), "float32", rtol=0, atol=0)


def benchmarks(ctx):
    import cupy as cp
    check_copies(ctx)
    n = (64 << 20) if ctx.quick else (128 << 20)          # 512 MiB of fp32 (256 MiB quick)
    x = cp.random.standard_normal(n, dtype=cp.float32)
    y = cp.empty_like(x)
    base = bench(lambda: cp.copyto(y, x))
    for name, fn in COPIES.items():
        t = bench(lambda: fn(x, y))
        yield ctx.record(chapter="01", op="copy", kernel=name, shape=[n], dtype="float32", bytes=2 * 4 * n, flops=0,
                         timing=t, baseline="cupy.copyto", baseline_timing=base, ceiling="copy")
    # the two arithmetic probes, timed in this run (the ceilings' own figures come from the same kernels)
    c = ctx.ceilings
    launch, flops = ceilings.fma_launch()
    t = bench(launch, flush_l2=False, target_ms=400)
    peak_ms = flops / (c["fp32_peak_tflops"] * 1e12) * 1e3 if c.get("fp32_peak_tflops") else None
    yield ctx.record(chapter="01", op="fma", kernel="fma_probe", shape=[ctx.sms * 8 * 256], dtype="float32", bytes=0,
                     flops=flops, timing=t, baseline="fp32 peak: SMs x lanes x 2 x clock",
                     baseline_timing=Timing(peak_ms, 0, peak_ms, peak_ms, 0) if peak_ms else None,
                     ceiling="fp32_peak", note=f"SM clock {c.get('sm_clock_mhz')} MHz ({c.get('sm_clock_source')})")
    if c.get("mma_tflops"):
        launch, flops = ceilings.mma_launch()
        t = bench(launch, flush_l2=False, target_ms=300)
        yield ctx.record(chapter="01", op="mma", kernel="mma_probe", shape=[ctx.sms * 4 * 256], dtype="bfloat16",
                         bytes=0, flops=flops, timing=t, ceiling="bf16",
                         note="bf16 mma.sync m16n8k16 from registers, against cuBLAS bf16 at 8192^3")


# ------------------------------------------------------------------ operations placed on the roofline
# (FLOPs, minimal DRAM bytes) of common operations in bf16, by one size parameter: the lab's control.
OPERATIONS = {
    "bf16 add y = x + b (n elements)": lambda n: (n, 6 * n),
    "softmax, rows of 4096 (n rows)": lambda n: (5 * n * 4096, 4 * n * 4096),
    "RMSNorm, hidden 4096 (n rows)": lambda n: (4 * n * 4096, 4 * n * 4096),
    "GEMM n x n x n": lambda n: (2 * n ** 3, 6 * n ** 2),
    "attention, 16 heads x d=128, n tokens (one sequence)": lambda n: (4 * 16 * n * n * 128, 4 * 2 * 16 * n * 128),
}


def operation_point(op: str, n: int, ceilings: dict) -> dict:
    """Where an operation of size n sits: intensity, attainable TFLOP/s, floor time and which roof binds."""
    from ..measure.roofline import roof
    flops, nbytes = OPERATIONS[op](n)
    ai = flops / nbytes
    t_mem = nbytes / (ceilings["copy_gbps"] * 1e9)
    t_math = flops / (ceilings["bf16_tflops"] * 1e12)
    return {"label": f"{op.split(' (')[0]}, n={n}", "intensity": ai,
            "tflops": roof(ai, ceilings["copy_gbps"], ceilings["bf16_tflops"]),
            "floor_us": 1e6 * max(t_mem, t_math), "bound": "memory" if t_mem >= t_math else "compute",
            "flops": flops, "bytes": nbytes}
