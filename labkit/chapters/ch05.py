"""Chapter 05: fp32 GEMM on CUDA cores, a ladder from a naive kernel to a tuned warp-tiled one, against
cuBLAS fp32 (torch.matmul with TF32 off) and the FMA roof.

Kernels (kernels/05-gemm-simt/), each `sgemm_<name>(const float* A, const float* B, float* C, int M, int N,
int K)` computing C = A @ B for row-major A (M x K), B (K x N) and C (M x N), correct for any M, N, K >= 1:
- 01_naive.cu          one thread per element of C, threadIdx.x along M (B's loads uncoalesced);
- 02_coalesced.cu      the same with threadIdx.x along N;
- 03_smem_tiles.cu     TILE x TILE tiles of A and B staged in shared memory;
- 04_blocktile_1d.cu   TM results per thread down a column (register blocking in one dimension);
- 05_blocktile_2d.cu   TM x TN outer products per thread;
- 06_vectorized.cu     float4 global loads, A transposed in shared memory so the inner loop reads float4;
- 07_warptile.cu       warp tiles of WM x WN, each lane WMITER x WNITER blocks of TM x TN;
- 08_double_buffer.cu  two shared-memory stages, the next slab's loads overlapping this slab's FMAs.
The "tuned" rung is 08 compiled with TUNED, the best -D values of the chapter's tuning sweep.

Every kernel's geometry (grid, block, dynamic shared memory) follows from its macros (`geometry`), which
are the file's own defaults overridden by -D values.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re

import numpy as np

from ..errors import CheckFailed, KernelInputError
from ..measure.checks import GuardedOutput, expect
from ..measure.compile import kernel, read_source
from ..measure.timing import bench

NAIVE = "05-gemm-simt/01_naive.cu"
COALESCED = "05-gemm-simt/02_coalesced.cu"
SMEM_TILES = "05-gemm-simt/03_smem_tiles.cu"
BLOCKTILE_1D = "05-gemm-simt/04_blocktile_1d.cu"
BLOCKTILE_2D = "05-gemm-simt/05_blocktile_2d.cu"
VECTORIZED = "05-gemm-simt/06_vectorized.cu"
WARPTILE = "05-gemm-simt/07_warptile.cu"
DOUBLE_BUFFER = "05-gemm-simt/08_double_buffer.cu"

# the best configuration of 08_double_buffer.cu in the tuning sweep on the H200 (46 configurations,
# labs/results/logs/2026-12-01/sgemm-ladder-sweep.log): 128 x 256 block tiles of 8 warps, each warp 32 x 128,
# BK = 16, one block per SM; the lab's sweep measures it again beside its neighbours
TUNED = {"BM": 128, "BN": 256, "BK": 16, "WM": 32, "WN": 128, "WNITER": 4, "TM": 4, "TN": 4, "MINB": 1, "APAD": 4}

HEADLINE = {"sgemm": "4096x4096x4096"}   # the shape the book's plain figures refer to
BENCH_SHAPES = ((4096, 4096, 4096), (8192, 1024, 4096))      # the square headline and a rectangular one
QUICK_SHAPES = ((2048, 2048, 2048), (4096, 512, 2048))
SLOW = ("naive", "coalesced")           # at most a few runs at the large shapes
CHECK_SHAPES = [(1, 1, 1), (2, 3, 5), (17, 19, 23), (127, 129, 131), (128, 128, 128), (129, 127, 65),
                (257, 255, 64), (4096, 64, 512), (64, 64, 8191), (1000, 1000, 1000)]
EPS32 = float(np.finfo(np.float32).eps)


@dataclasses.dataclass(frozen=True)
class Rung:
    name: str           # the record's kernel name
    path: str           # the kernel file under kernels/
    function: str       # its entry point
    macros: tuple = ()  # -D overrides as (name, value) pairs


RUNGS = (Rung("naive", NAIVE, "sgemm_naive"), Rung("coalesced", COALESCED, "sgemm_coalesced"),
         Rung("smem_tiles", SMEM_TILES, "sgemm_smem_tiles"), Rung("blocktile_1d", BLOCKTILE_1D, "sgemm_blocktile_1d"),
         Rung("blocktile_2d", BLOCKTILE_2D, "sgemm_blocktile_2d"), Rung("vectorized", VECTORIZED, "sgemm_vectorized"),
         Rung("warptile", WARPTILE, "sgemm_warptile"), Rung("double_buffer", DOUBLE_BUFFER, "sgemm_double_buffer"))


def rungs() -> dict[str, Rung]:
    """The ladder by name, the tuned configuration last (where the sweep has found one)."""
    out = {r.name: r for r in RUNGS}
    if TUNED:
        out["tuned"] = Rung("tuned", DOUBLE_BUFFER, "sgemm_double_buffer", tuple(sorted(TUNED.items())))
    return out


@functools.lru_cache(maxsize=None)
def file_macros(path: str) -> dict[str, int]:
    """A kernel file's integer macros: its `#ifndef NAME / #define NAME value` defaults and constants."""
    src, _ = read_source(path)
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define\s+(\w+)\s+(-?\d+)\b", src, re.M)}


def geometry(path: str, macros: dict) -> tuple[int, int, tuple, int]:
    """(BM, BN, block, dynamic shared memory bytes) of a kernel file compiled with `macros` (overrides)."""
    g = {**file_macros(path), **macros}
    name = path.rsplit("/", 1)[-1]
    if name in ("01_naive.cu", "02_coalesced.cu"):
        return g["BLOCK"], g["BLOCK"], (g["BLOCK"], g["BLOCK"], 1), 0
    if name == "03_smem_tiles.cu":
        return g["TILE"], g["TILE"], (g["TILE"], g["TILE"], 1), 0
    if name == "04_blocktile_1d.cu":
        return g["BM"], g["BN"], (g["BM"] * g["BN"] // g["TM"], 1, 1), 0
    if name in ("05_blocktile_2d.cu", "06_vectorized.cu"):
        return g["BM"], g["BN"], ((g["BM"] // g["TM"]) * (g["BN"] // g["TN"]), 1, 1), 0
    threads = (g["BM"] // g["WM"]) * (g["BN"] // g["WN"]) * 32
    smem = 2 * g["BK"] * (g["BM"] + g["APAD"] + g["BN"]) * 4 if name == "08_double_buffer.cu" else 0
    return g["BM"], g["BN"], (threads, 1, 1), smem


def options(macros) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in sorted(dict(macros).items()))


def launch_config(rung: Rung, M: int, N: int):
    """(grid, block, dynamic shared memory bytes) for C of M x N."""
    bm, bn, block, smem = geometry(rung.path, dict(rung.macros))
    grid = (-(-N // bn), -(-M // bm), 1)
    if grid[1] > 65535:
        raise KernelInputError(f"M = {M} needs {grid[1]} rows of blocks: at most 65535 (the grid's y dimension)")
    return grid, block, smem


def sgemm(A, B, C, version: str = "tuned", rung: Rung | None = None):
    """C = A @ B in fp32 with one rung of the ladder (`version`, or an explicit `rung` with its macros).
    A (M x K), B (K x N) and C (M x N): float32 CuPy arrays, C-contiguous. Any M, N, K >= 1; the
    vectorised rungs take their float4 path when K and N are multiples of 4 and the pointers 16-byte
    aligned, and a checked element path otherwise."""
    import cupy as cp
    if rung is None:
        table = rungs()
        if version not in table:
            raise KernelInputError(f"no sgemm version {version!r}: one of {', '.join(table)}")
        rung = table[version]
    expect("A", A, dtype=np.float32, ndim=2, align=4)
    M, K = A.shape
    expect("B", B, dtype=np.float32, ndim=2, align=4)
    if B.shape[0] != K:
        raise KernelInputError(f"B has {B.shape[0]} rows, A has {K} columns: A @ B needs them equal")
    N = B.shape[1]
    expect("C", C, dtype=np.float32, shape=(M, N), align=4)
    if max(M, N, K) >= 2 ** 31:
        raise KernelInputError(f"each of M, N, K must be below 2^31 (int arguments), got {M}, {N}, {K}")
    if M == 0 or N == 0:
        return
    if K == 0:
        C.fill(0)
        return
    grid, block, smem = launch_config(rung, M, N)
    k = kernel(rung.path, rung.function, options(rung.macros))
    if smem > 48 * 1024:
        k.max_dynamic_shared_size_bytes = smem
    k(grid, block, (A, B, C, np.int32(M), np.int32(N), np.int32(K)), shared_mem=smem)


# --------------------------------------------------------------------------------------------- checks

def random_matrix(shape, offset: float = 0.0):
    """Fresh random fp32 values on the GPU (normal, never zeros)."""
    import cupy as cp
    return cp.random.standard_normal(shape, dtype=cp.float32) + cp.float32(offset)


def tolerance(K: int, A, B) -> float:
    """Absolute tolerance of an fp32 GEMM against float64: rounding errors of K fp32 products and sums grow
    at most like K eps |a||b| (4 K eps rms(a) rms(b), far above the ~sqrt(K) eps typical, and far below what
    one missing product or TF32's 10-bit mantissa costs)."""
    ra = float(np.sqrt(np.mean(np.square(A, dtype=np.float64)))) if A.size else 0.0
    rb = float(np.sqrt(np.mean(np.square(B, dtype=np.float64)))) if B.size else 0.0
    return 4 * max(K, 1) * EPS32 * ra * rb + 1e-30


def check_rung(ctx, rung: Rung, M: int, N: int, K: int, what: str | None = None) -> None:
    """Run `rung` on fresh random A, B (host float64 reference) into a poisoned, canary-padded C."""
    import cupy as cp
    A, B = random_matrix((M, K)), random_matrix((K, N))
    out = GuardedOutput((M, N), "float32")
    sgemm(A, B, out.array, rung=rung)
    a, b = A.get(), B.get()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    ctx.verify(what or f"sgemm {rung.name} {M}x{N}x{K}", out, ref, "float32", rtol=0, atol=tolerance(K, a, b))
    del A, B, out
    cp.get_default_memory_pool().free_all_blocks()


def check_misaligned(ctx, rung: Rung, M=129, N=132, K=68) -> None:
    """A view of A that starts 4 bytes past a 16-byte boundary: the float4 path must not be taken."""
    import cupy as cp
    buf = random_matrix(M * K + 1)
    A = buf[1:].reshape(M, K)
    B = random_matrix((K, N))
    out = GuardedOutput((M, N), "float32")
    sgemm(A, B, out.array, rung=rung)
    ref = A.get().astype(np.float64) @ B.get().astype(np.float64)
    ctx.verify(f"sgemm {rung.name} {M}x{N}x{K} (A 4 bytes off 16-byte alignment)", out, ref, "float32", rtol=0,
               atol=tolerance(K, A.get(), B.get()))


def check_all(ctx, names=None) -> None:
    for name, rung in rungs().items():
        if names is not None and name not in names:
            continue
        for M, N, K in CHECK_SHAPES:
            if name in SLOW and M * N * K > 1e9:
                continue
            check_rung(ctx, rung, M, N, K)
        check_misaligned(ctx, rung)


# ------------------------------------------------------------------------------------------ cuBLAS

def cublas_fp32(A, B, C):
    """C = A @ B through cuBLAS in true fp32 (torch.matmul, TF32 switched off for the call)."""
    import torch
    with fp32_matmul(torch):
        torch.matmul(as_torch(A), as_torch(B), out=as_torch(C))


class fp32_matmul:
    """A context in which torch's fp32 matmuls use fp32 arithmetic, not TF32 (torch's newer
    `fp32_precision` switch where it has one, else `allow_tf32`)."""

    def __init__(self, torch):
        self.m = torch.backends.cuda.matmul

    def __enter__(self):
        if hasattr(self.m, "fp32_precision"):
            self.old = ("fp32_precision", self.m.fp32_precision)
            self.m.fp32_precision = "ieee"
        else:
            self.old = ("allow_tf32", self.m.allow_tf32)
            self.m.allow_tf32 = False
        return self

    def __exit__(self, *exc):
        setattr(self.m, *self.old)


def as_torch(a):
    import torch
    return torch.from_dlpack(a)


def check_cublas(ctx, M=1000, N=1000, K=1000) -> None:
    """The baseline is held to the same tolerance: a cuBLAS that silently used TF32 would fail here."""
    A, B = random_matrix((M, K)), random_matrix((K, N))
    out = GuardedOutput((M, N), "float32")
    cublas_fp32(A, B, out.array)
    a, b = A.get(), B.get()
    ctx.verify(f"cuBLAS fp32 (TF32 off) {M}x{N}x{K}", out, a.astype(np.float64) @ b.astype(np.float64), "float32",
               rtol=0, atol=tolerance(K, a, b))


# ------------------------------------------------------------------------------------------ benchmarks

def flops(M, N, K) -> int:
    return 2 * M * N * K


def compulsory_bytes(M, N, K) -> int:
    """Each matrix moved once: A and B read, C written (fp32)."""
    return 4 * (M * K + K * N + M * N)


def benchmarks(ctx):
    import cupy as cp
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        ctx.log.append("torch not installed: sgemm recorded without the cuBLAS baseline")
    check_all(ctx)
    if have_torch:
        check_cublas(ctx)
    for M, N, K in (QUICK_SHAPES if ctx.quick else BENCH_SHAPES):
        A, B = random_matrix((M, K)), random_matrix((K, N))
        C = cp.empty((M, N), dtype=cp.float32)
        base = None
        if have_torch:
            base = bench(lambda: cublas_fp32(A, B, C), max_reps=50)
            yield _record(ctx, "cublas_fp32", (M, N, K), base, None)
        for name, rung in rungs().items():
            if name in SLOW and M * N * K > 1e10:
                t = bench(lambda: sgemm(A, B, C, rung=rung), reps=3, warmup_ms=1.0)
            else:
                t = bench(lambda: sgemm(A, B, C, rung=rung), max_reps=50)
            yield _record(ctx, name, (M, N, K), t, base)
        del A, B, C
        cp.get_default_memory_pool().free_all_blocks()


def _record(ctx, kernel_name, shape, t, base):
    M, N, K = shape
    return ctx.record(chapter="05", op="sgemm", kernel=kernel_name, shape=[M, N, K], dtype="float32",
                      bytes=compulsory_bytes(M, N, K), flops=flops(M, N, K), timing=t,
                      baseline="cuBLAS fp32 (TF32 off)" if base is not None and kernel_name != "cublas_fp32" else None,
                      baseline_timing=base if kernel_name != "cublas_fp32" else None, ceiling="fp32")


# ----------------------------------------------------------------------------------------- the lab

def tuning_configs(limit: int | None = None) -> list[dict]:
    """Configurations of 08_double_buffer.cu for the lab's sweep: the tuned one, the file's default and
    their neighbours (block tile, slab depth, warp shape), each checked by `fits`."""
    out, seen = [], set()
    base = dict(file_macros(DOUBLE_BUFFER))

    def add(**c):
        c = {k: c.get(k, base[k] if k in base else TUNED[k]) for k in TUNED}
        key = tuple(sorted(c.items()))
        if key not in seen and fits(c):
            seen.add(key)
            out.append(c)

    add(**TUNED)
    add(**{k: base[k] for k in TUNED if k in base})
    for BM, BN in ((128, 256), (256, 128), (128, 128)):
        for BK in (8, 16):
            for WM, WN, WNITER in ((32, 128, 4), (64, 64, 4), (64, 64, 2), (32, 64, 2), (64, 32, 2)):
                for MINB in (1, 2):
                    add(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, WNITER=WNITER, TM=4, TN=4, MINB=MINB, APAD=4)
    return out[:limit] if limit else out


def fits(c: dict) -> bool:
    """Whether a configuration of 08_double_buffer.cu satisfies its static_asserts and the SM's limits."""
    BM, BN, BK, WM, WN, WNITER, TM, TN, MINB, APAD = (c[k] for k in
                                                    ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "MINB", "APAD"))
    if BM % WM or BN % WN:
        return False
    nt = (BM // WM) * (BN // WN) * 32
    if nt > 1024 or (WM * WN) % (32 * TM * TN * WNITER):
        return False
    wmiter = WM * WN // (32 * TM * TN * WNITER)
    if wmiter < 1 or WM % wmiter or WN % WNITER:
        return False
    wsm, wsn = WM // wmiter, WN // WNITER
    if wsm % TM or wsn % TN or (wsm // TM) * (wsn // TN) != 32:
        return False
    if (BM * BK // 4) % nt or (BK * BN // 4) % nt:
        return False
    smem = 2 * BK * (BM + APAD + BN) * 4
    if smem > 227 * 1024 or nt * MINB > 2048 or smem * MINB > 228 * 1024:
        return False
    acc = wmiter * TM * WNITER * TN
    return acc + wmiter * TM + WNITER * TN + 8 <= min(255, 65536 // (nt * MINB))


def tune(configs, shape=(4096, 4096, 4096), progress: bool = True) -> list[dict]:
    """Compile, check and time each configuration of 08_double_buffer.cu at `shape`. Each is first checked
    on (257, 255, 64) and (256, 384, 128) against float64; then timed. Returns one dict per
    configuration: its macros, ms, TFLOP/s, or the reason it was skipped."""
    import cupy as cp
    from ..measure.progress import tqdm

    from ..measure.context import Context
    M, N, K = shape
    A, B = random_matrix((M, K)), random_matrix((K, N))
    C = cp.empty((M, N), dtype=cp.float32)
    scratch = Context({}, {"sm_count": 0})
    rows = []
    for c in tqdm(list(configs), desc="tuning 08_double_buffer", disable=not progress):
        rung = Rung("candidate", DOUBLE_BUFFER, "sgemm_double_buffer", tuple(sorted(c.items())))
        try:
            for s in ((257, 255, 64), (256, 384, 128)):
                check_rung(scratch, rung, *s)
        except CheckFailed as e:
            rows.append({**c, "error": str(e)[:200]})
            continue
        except Exception as e:          # a configuration ptxas or the driver refuses: noted, not fatal
            rows.append({**c, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            continue
        t = bench(lambda: sgemm(A, B, C, rung=rung), max_reps=20, target_ms=150)
        rows.append({**c, "ms": t.median_ms, "tflops": flops(M, N, K) / (t.median_ms * 1e-3) / 1e12})
    del A, B, C
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def operand_intensity(BM: int, BN: int, BK: int | None = None) -> float:
    """FLOP per byte a BM x BN tile of C reads from global memory: 2 BM BN BK FLOPs per BK-slab for
    4 (BM + BN) BK bytes, i.e. BM BN / (2 (BM + BN)), whatever BK (the slab depth cancels)."""
    return BM * BN / (2 * (BM + BN))


def tile_traffic(M, N, K, BM, BN) -> int:
    """Bytes the blocks of BM x BN tiles read from L2/DRAM in all: A re-read N/BN times, B M/BM times,
    plus C written once."""
    return 4 * (M * K * math.ceil(N / BN) + K * N * math.ceil(M / BM) + M * N)
