"""Chapter 05 exercises: tile arithmetic, an SGEMM with shared-memory tiles, and a register-blocked SGEMM
timed against cuBLAS fp32 (TF32 off) in the same grade.

Every shape is (M, N, K): C (M x N) = A (M x K) @ B (K x N), fp32, row-major. The reference is A @ B in
float64 from the inputs as generated (on the host for small outputs, cupy float64 matmul on the GPU for
large ones: the worker's rule), and the tolerance is the chapter's (labkit.chapters.ch05.tolerance):
4 K eps32 rms(A) rms(B), computed per case from its own inputs, plus eps32 relative (the rounding of the
output itself, all there is at K = 1). TF32's 10-bit mantissa, or one product of K missing, is far outside
it.

Hard inputs: A and B are views at the start of larger allocations whose rest is NaN, 128 rows of K past A
and 32 rows of N past B. A correct kernel never reads there (the edge tiles are zero-filled). A kernel that
reads past the K tail or the M / N edges and counts on the other operand's zero (0 * garbage) gets
0 * NaN = NaN, so the verdict names the element; one that skips the K tail misses products of normal
values. No planted large-magnitude row: with a tolerance scaled by rms(A), a row of 1e4 would widen it for
every other row and let TF32 rounding through.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from .tasks import KernelTask, NumericTask, Question, primes_between

EPS32 = float(np.finfo(np.float32).eps)

# The speed bar of 05.regblock_sgemm, % of cuBLAS fp32 measured in the same grade at SPEED_SHAPE.
# An ESTIMATE, not a measurement: MUST BE SET FROM THE H200 MEASUREMENT of the reference solution (the
# notebook's sgemm_regblock: grade it, read its "% of cuBLAS fp32"), at about 0.75 x that figure (a margin
# for run-to-run spread and a busy GPU), and the notebook's markdown with it (a CPU test checks they agree).
# Estimate: on the H200 (labs/results/logs/2026-12-01/sgemm-ladder-sweep.log, cuBLAS 51.4 TFLOP/s at
# 4096^3) the ladder's 05_blocktile_2d.cu, the same 128 x 128 x 8 tile with 8 x 8 per thread and As[m][k],
# ran at 53.5% of cuBLAS, and 06_vectorized.cu at 61.4% with A untransposed and 69.6% transposed; the
# reference here keeps 05's scalar global loads but stores A transposed (LDS.128 for both operands, 16 FFMA
# per shared load; ptxas: 126 registers, no spills): predicted ~60%, so a bar of 45%.
REGBLOCK_SPEED_PCT = 45.0
SPEED_SHAPE = (4096, 4096, 4096)

# NaN rows after each input (see the module's docstring): the farthest a 128-row block tile reads past
# A's last row, and a slab of up to 32 rows past B's last row; plus the column overhang of a tile.
A_PAD_ROWS, B_PAD_ROWS, PAD_TAIL = 128, 32, 128

numbers = NumericTask(
    id="05.numbers",
    title="Tiles, shared memory and occupancy (H200: 65536 registers and 2048 threads per SM, 227 KB shared "
          "memory per block at most, 228 KB per SM, 132 SMs)",
    answers_var="tile_answers",
    questions=[
        Question("intensity_128x128", "FLOP per byte of global traffic of one 128 x 128 tile of C, fp32, BK = 8",
                 128 * 128 / (2 * (128 + 128)),
                 "per slab: 2 BM BN BK FLOPs over the bytes of one BM x BK slab of A and one BK x BN slab of B, "
                 "4 bytes each (BK cancels)", rtol=0.01),
        Question("smem_bytes_bk8", "shared memory per block in bytes: 128 x 128 tile, BK = 8, one buffer",
                 (128 * 8 + 8 * 128) * 4, "one BM x BK slab of A plus one BK x BN slab of B, 4 bytes per float",
                 rtol=0),
        Question("smem_bytes_bk8_double", "the same, double-buffered (two stages of both slabs)",
                 2 * (128 * 8 + 8 * 128) * 4, "two copies of both slabs", rtol=0),
        Question("blocks_per_sm_256x128regs", "resident blocks per SM: 256 threads per block, 128 registers per "
                 "thread (shared memory as above, single-buffered)", min(2048 // 256, 65536 // (256 * 128)),
                 "the smallest of the limits: threads (2048 / 256), registers (65536 / (256 x 128)), shared "
                 "memory (228 KB / 8 KB)", rtol=0),
        Question("occupancy_256x128regs", "the occupancy that gives (resident threads / 2048)", 2 * 256 / 2048,
                 "resident blocks x 256 threads, over 2048", rtol=0.01),
        Question("gemm_flops_4096", "floating-point operations of one 4096 x 4096 x 4096 product C = A @ B",
                 2 * 4096 ** 3, "one multiply and one add for each (m, n, k)", rtol=0.005),
    ])


# ----------------------------------------------------------------------------------- shared pieces

def _padded(gen, rows: int, cols: int, pad: int):
    """A rows x cols fp32 random normal matrix at the start of an allocation whose next `pad` elements are
    NaN (what a kernel reads past the end of the matrix)."""
    import cupy as cp
    n = rows * cols
    raw = gen.normal(n + pad, "f32")
    raw[n:] = cp.nan
    return raw[:n].reshape(rows, cols)


def _inputs(case, gen):
    M, N, K = case.shape
    A = _padded(gen, M, K, A_PAD_ROWS * K + PAD_TAIL)
    B = _padded(gen, K, N, B_PAD_ROWS * N + PAD_TAIL)
    return {"A": (A, "f32"), "B": (B, "f32")}


def _reference(xp, ins, case):
    return ins["A"] @ ins["B"]


def rms(xp, a) -> float:
    return float(xp.sqrt(xp.mean(xp.square(a)))) if a.size else 0.0


def gemm_atol(xp, ins, case) -> float:
    """The absolute tolerance of one case (labkit.chapters.ch05.tolerance, from the case's own inputs):
    4 K eps32 rms(A) rms(B)."""
    K = case.shape[2]
    return 4 * max(K, 1) * EPS32 * rms(xp, ins["A"]) * rms(xp, ins["B"]) + 1e-30


def cublas_baseline(ins, out, case):
    """C = A @ B through cuBLAS in fp32 on the case's inputs: labkit.chapters.ch05.cublas_fp32 (torch, TF32
    off); without torch, cupy.matmul (cuBLAS too, fp32 unless CUPY_TF32 is set; the worker checks the
    baseline's output against the reference either way)."""
    if importlib.util.find_spec("torch") is None:
        import cupy as cp
        cp.matmul(ins["A"], ins["B"], out=out)
        return
    from ..chapters.ch05 import cublas_fp32
    cublas_fp32(ins["A"], ins["B"], out)


def _launcher(tile_m: int, tile_n: int, block: tuple):
    def launch(k, ins, out, case, ctx):
        import cupy as cp
        M, N, K = case.shape
        if M and N:
            k((-(-N // tile_n), -(-M // tile_m)), block,
              (ins["A"], ins["B"], out, cp.int32(M), cp.int32(N), cp.int32(K)))
    return launch


def _flops(s):
    return 2 * s[0] * s[1] * s[2]


def _bytes(s):
    M, N, K = s
    return 4 * (M * K + K * N + M * N)


def _tiles_off_by_one(rng, tile: int, most: int):
    """A shape one off a multiple of the tile in each dimension (drawn: which multiple, and +1 or -1)."""
    def one():
        return tile * rng.randrange(1, most) + rng.choice((-1, 1))
    return (one(), one(), one())


_COMMON = dict(inputs=_inputs, reference=_reference, out_shape=lambda s: (s[0], s[1]), out_dtype="float32",
               bytes_moved=_bytes, flops=_flops, rtol=EPS32, atol=gemm_atol, ref_temps=1,
               floor_peaks=("fp32_tflops",))

_SIGNATURE = 'extern "C" __global__ void {name}(const float* A, const float* B, float* C, int M, int N, int K)'


# ------------------------------------------------------------------------- shared-memory tiles (fp32)

def _smem_hidden(rng):
    """Fixed: tall-skinny (one column of tiles), K-heavy (129 slabs, the last one of 3), one row of A
    against a wide B, a 2 x 2 grid of tiles each one short; drawn: primes, and one off a multiple of 32."""
    return [(1024, 32, 256), (32, 32, 4099), (1, 1000, 77), (63, 63, 63),
            (primes_between(rng, 2, 400), primes_between(rng, 2, 400), primes_between(rng, 2, 1200)),
            _tiles_off_by_one(rng, 32, 12)]


smem_sgemm = KernelTask(
    id="05.smem_sgemm",
    title="SGEMM with 32 x 32 shared-memory tiles",
    kernel="sgemm_smem",
    signature=_SIGNATURE.format(name="sgemm_smem"),
    source_var="sgemm_smem_src",
    shapes=[(1, 1, 1), (17, 19, 23), (33, 31, 65), (128, 128, 128), (129, 127, 1)],
    launch=_launcher(32, 32, (32, 32)),
    launch_text="grid = (ceil(N / 32), ceil(M / 32)), block = (32, 32): threadIdx.x runs along the columns "
                "of C (N), threadIdx.y along its rows (M)",
    speed_shape=SPEED_SHAPE, speed_threshold=None,          # timed for information only
    speed_baseline=cublas_baseline, baseline_name="cuBLAS fp32",
    points_correct=3, points_hidden=1, points_speed=0,
    hidden_shapes=_smem_hidden,
    **_COMMON,
)


# ------------------------------------------------------------------------ register blocking (fp32)

def _reg_hidden(rng):
    """Fixed: tall-skinny, K-heavy (513 slabs of 8, the last one of 3), a tile and one more in M and N with
    a K that is not a multiple of 8, one row, one column; drawn: primes, and one off a multiple of 128."""
    return [(1024, 32, 256), (32, 32, 4099), (129, 129, 9), (1, 300, 64), (300, 1, 64),
            (primes_between(rng, 2, 600), primes_between(rng, 2, 600), primes_between(rng, 2, 1200)),
            _tiles_off_by_one(rng, 128, 6)]


regblock_sgemm = KernelTask(
    id="05.regblock_sgemm",
    title="Register-blocked SGEMM: 128 x 128 block tiles, 8 x 8 outputs per thread, BK = 8",
    kernel="sgemm_regblock",
    signature=_SIGNATURE.format(name="sgemm_regblock"),
    source_var="sgemm_regblock_src",
    shapes=[(1, 1, 1), (17, 19, 23), (128, 128, 128), (129, 127, 9), (257, 130, 200), (512, 384, 1000)],
    launch=_launcher(128, 128, (256,)),
    launch_text="grid = (ceil(N / 128), ceil(M / 128)), block = 256 threads (1-D): one block per 128 x 128 "
                "tile of C, each thread an 8 x 8 block of it",
    speed_shape=SPEED_SHAPE, speed_threshold=REGBLOCK_SPEED_PCT,
    speed_baseline=cublas_baseline, baseline_name="cuBLAS fp32",
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_reg_hidden,
    **_COMMON,
)

TASKS = (numbers, smem_sgemm, regblock_sgemm)
