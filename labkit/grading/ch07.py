"""Chapter 07 exercises (Hopper, sm_90a): the numbers of a TMA + wgmma pipeline, one TMA box through an
mbarrier into a swizzled shared-memory tile and back out un-swizzled, and a warp-specialised TMA-ring + wgmma
GEMM timed against cuBLAS bf16 in the same grade.

Both kernel tasks compile the learner's source for sm_90a (`KernelTask.arch`: wgmma and the "a" features exist
nowhere else) and grade only on a GPU of compute capability 9.0; elsewhere the verdict says so ("not graded:
... needs a Hopper GPU"), with no points and no crash.

The kernels take TMA tensor maps (labkit.measure.tensormap.tensor_map: 128 opaque bytes passed by value as a
`const __grid_constant__ TmaDesc`), which the launch builds from the case's inputs (cached per array: a map
costs a driver call, which must not land between the timing events).

07.tma_tile: X (R x C, bf16 bit patterns) is given only as a tensor map with 64 x 64 boxes and the 128-byte
swizzle; the kernel gets no pointer to X, so its one documented way to read X is TMA. Y (R x C) must equal X
bit for bit (rtol = atol = 0 on the exact bf16 values), the tail boxes included: their out-of-bounds part
arrives as zeros in shared memory and must not be written (Y is fenced by canaries). Contract: C % 8 == 0
(16-byte rows, TMA's rule; a 16-byte chunk of a box row is then wholly inside or outside X).

07.wgmma_gemm: C (M x N) = A (M x K) @ B_t (N x K)^T, all row-major bf16 (labkit.chapters.ch07's layout), fp32
accumulation, bf16 out. Tensor maps of A (128 x 64 boxes) and B_t (256 x 64 boxes), 128-byte swizzle; TMA
zero-fills the boxes that overhang M, N or K, so the contract is only N % 8 == 0 and K % 8 == 0 (16-byte rows);
M is anything >= 1. Tolerance (labkit.chapters.ch06.tolerance): |c - ref| <= 2^-8 |ref| + 8 K eps32 rms(A)
rms(B), per case from its own inputs: one rounding to bf16 on top of an fp32 accumulation; a missing K slice or
bf16 rounding inside the loop is far outside it. Hard inputs: the memory right after A and B_t holds NaN
(bf16 0x7FC0): TMA never reads there (the tensor map's bounds), a kernel that somehow did would get NaN.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from .ch05 import rms
from .ch06 import gemm_ex_bf16, padded_bf16
from .tasks import KernelTask, NumericTask, Question

EPS32 = float(np.finfo(np.float32).eps)
BF16_REL = 2.0 ** -8
NAN_TAIL = 4096         # NaN elements after each input: what a kernel reads past the end of a matrix

# The speed bar of 07.wgmma_gemm, % of cuBLAS bf16 measured in the same grade at SPEED_SHAPE.
# An ESTIMATE, not a measurement: MUST BE SET FROM THE H200 MEASUREMENT of the reference solution (the
# notebook's gemm_wgmma: grade it, read its "% of cuBLAS bf16"), at about 0.75 x that figure (a margin for
# run-to-run spread and a busy GPU), and the notebook's markdown with it (a CPU test checks they agree).
# Estimate: on the H200 (labs/results/logs/2026-12-01/gemm-hopper-ladder-sweep.log, cuBLAS 792 TFLOP/s at
# 4096^3) kernels/07-gemm-hopper/04_warp_specialized.cu, the same 128 x 256 x 64 tile, 4 stages, one producer
# and two consumer warpgroups with wgmma_wait<0>, ran at 88.0% of cuBLAS, and 03_tma_ring.cu BN=256 at 87.7%;
# the reference here keeps one wgmma group in flight (wait<1>) and uses no setmaxnreg (ptxas: 154 registers,
# no spills): predicted ~85-90%, so a bar of 65%. One grade on an H200 (2026-12-01, this helper's run of
# tests/test_ch07_grading.py -m gpu) read [87.3% of cuBLAS bf16: 684.0 vs 783.7 TFLOP/s, 0.201 ms]: 0.75 x
# 87.3 = 65.5, so 65 stands unless the lead's own measurement says otherwise.
WGMMA_SPEED_PCT = 65.0
SPEED_SHAPE = (4096, 4096, 4096)

# the fixed geometry of the two kernel tasks (the notebook's starter code uses the same numbers)
BOX = 64                                           # 07.tma_tile: 64 x 64 bf16 boxes, 128 threads
TILE_THREADS = 128
GEMM_BM, GEMM_BN, GEMM_BK, GEMM_STAGES, GEMM_THREADS = 128, 256, 64, 4, 384
GEMM_STAGE_BYTES = (GEMM_BM + GEMM_BN) * GEMM_BK * 2
GEMM_SMEM = 1024 + GEMM_STAGES * GEMM_STAGE_BYTES + 16 * GEMM_STAGES   # alignment slack, ring, barriers
ARCH = "sm_90a"

H200_SMEM_PER_BLOCK = 227 * 1024

# ------------------------------------------------------------------------------------------ numbers

numbers = NumericTask(
    id="07.numbers",
    title="The numbers of a TMA + mbarrier + wgmma pipeline (H200: 227 KB of shared memory per block at most; "
          "128 x 256 x 64 bf16 tiles)",
    answers_var="hopper_answers",
    questions=[
        Question("stage_bytes", "shared memory in bytes of one ring stage: a 128 x 64 box of A and a 256 x 64 box "
                 "of B_t, bf16", (128 + 256) * 64 * 2,
                 "one BM x BK box of A plus one BN x BK box of B_t, 2 bytes per bf16", rtol=0),
        Question("stages_fit", "how many such stages fit in 227 KB with 1 KB set aside (for aligning the ring to "
                 "1024 bytes and the barriers)", (227 * 1024 - 1024) // ((128 + 256) * 64 * 2),
                 "(227 x 1024 - 1024) // the stage's bytes, rounded down: a stage is all or nothing", rtol=0),
        Question("sbo_field", "the value of the stride byte offset field (bits 32-45) of the wgmma shared-memory "
                 "descriptor for a K-major tile in the 128-byte swizzle layout",
                 1024 >> 4, "the distance from one group of 8 rows (128 bytes each) to the next, in bytes, >> 4 "
                 "(PTX ISA, Matrix Descriptor Format: the offsets are encoded in units of 16 bytes)", rtol=0),
        Question("desc_step_k16", "what to add to that descriptor to address the next k16 slice of the 64-wide "
                 "tile", 32 >> 4, "16 bf16 of K are 32 bytes of a swizzled row; the start-address field is also "
                 "in units of 16 bytes", rtol=0),
        Question("swizzle_span_bytes", "the span in bytes of the 128-byte swizzle: one swizzled row, the widest "
                 "inner box dimension it allows", 128,
                 "the swizzle permutes the 16-byte chunks within each 128-byte row (PTX ISA, Tensor Swizzling "
                 "Modes); a box row may be at most that wide", rtol=0),
        Question("k_per_swizzle_row", "how many bf16 values of K one swizzle row holds (hence BK = 64)", 128 // 2,
                 "the span in bytes over 2 bytes per bf16", rtol=0),
        Question("tx_bytes_k_tail", "the transaction bytes one stage's mbarrier expects for the LAST K slice of "
                 "K = 1000 (only 40 of its 64 columns lie inside A and B_t)", (128 + 256) * 64 * 2,
                 "TMA writes the whole box, the zero-filled part too, and counts every byte it writes: the "
                 "same as a full stage (PTX ISA, cp.async.bulk.tensor and mbarrier complete_tx)", rtol=0),
        Question("wgmma_flops", "floating-point operations of one wgmma.mma_async m64n256k16", 2 * 64 * 256 * 16,
                 "a multiply and an add for each (m, n, k) of 64 x 256 x 16", rtol=0),
        Question("acc_regs_per_thread", "fp32 accumulator registers per thread of a warpgroup holding one "
                 "m64n256 tile", 64 * 256 // 128,
                 "64 x 256 fp32 values spread over the 128 threads of the warpgroup (PTX ISA, wgmma register "
                 "fragments: the D matrix)", rtol=0),
    ])


# ----------------------------------------------------------------------------------- shared pieces

def _maps(ctx, *specs):
    """The tensor maps of (array, box_rows) pairs, cached on the worker's ctx by the array's address, shape and
    strides (a map holds nothing else), so a timed launch does not pay for the driver call."""
    from ..measure.tensormap import tensor_map
    cache = getattr(ctx, "tensor_maps", None) if ctx is not None else None
    if cache is None:
        cache = {}
        if ctx is not None:
            ctx.tensor_maps = cache
    out = []
    for a, box_rows in specs:
        key = (int(a.data.ptr), tuple(a.shape), tuple(a.strides), box_rows)
        if key not in cache:
            if len(cache) > 64:
                cache.clear()
            cache[key] = tensor_map(a, box_rows, 64, 128)
        out.append(cache[key])
    return out


# ------------------------------------------------------------------------------- one TMA box per block

def _tile_inputs(case, gen):
    R, C = case.shape
    return {"X": (padded_bf16(gen, R, C, NAN_TAIL), "bf16")}


def _tile_reference(xp, ins, case):
    return ins["X"]


def _tile_launch(k, ins, out, case, ctx):
    import cupy as cp
    R, C = case.shape
    X = ins["X"]
    (mx,) = _maps(ctx, (X, BOX))
    k((-(-C // BOX), -(-R // BOX)), (TILE_THREADS,), (mx, out, cp.int32(R), cp.int32(C)))


def _tile_hidden(rng):
    """Fixed: one row of one chunk, one column of chunks 1000 rows deep, exactly one box, a box and one chunk
    more each way, a 2 x 2 grid of boxes each one chunk short; drawn: two shapes off the box grid (R any,
    C a multiple of 8), one of them a few MB."""
    def drawn(most_r, most_c):
        return (rng.randrange(1, most_r), 8 * rng.randrange(1, most_c))
    return [(1, 8), (1000, 8), (64, 64), (65, 72), (120, 120), drawn(700, 130), drawn(3000, 500)]


tma_tile = KernelTask(
    id="07.tma_tile",
    title="One TMA box per block: cp.async.bulk.tensor into 128-byte-swizzled shared memory, an mbarrier, and "
          "back out un-swizzled",
    kernel="tma_tile",
    signature='extern "C" __global__ void tma_tile(const __grid_constant__ TmaDesc tmX, unsigned short* Y, '
              'int R, int C)',
    source_var="tma_tile_src",
    shapes=[(1, 8), (64, 64), (64, 128), (65, 72), (130, 200), (333, 8), (1000, 1008)],
    inputs=_tile_inputs,
    reference=_tile_reference,
    launch=_tile_launch,
    out_shape=lambda s: (s[0], s[1]),
    out_dtype="bfloat16",
    bytes_moved=lambda s: 4 * s[0] * s[1],
    launch_text="grid = (ceil(C / 64), ceil(R / 64)), block = 128 threads, no dynamic shared memory: block "
                "(x, y) copies the box of X at rows 64y..64y+63, columns 64x..64x+63. tmX is the tensor map of X "
                "(R x C bf16, row-major) with 64 x 64 boxes and the 128-byte swizzle, built by the grader: "
                "tensor_map(X, 64, 64, 128). Contract: C % 8 == 0",
    rtol=0.0, atol=0.0,
    points_correct=3, points_hidden=1, points_speed=0,
    hidden_shapes=_tile_hidden,
    arch=ARCH,
    ref_temps=0,
)


# ------------------------------------------------------------------- TMA ring + wgmma GEMM (bf16 out)

def _gemm_inputs(case, gen):
    M, N, K = case.shape
    return {"A": (padded_bf16(gen, M, K, NAN_TAIL), "bf16"), "B_t": (padded_bf16(gen, N, K, NAN_TAIL), "bf16")}


def _gemm_reference(xp, ins, case):
    return ins["A"] @ ins["B_t"].T


def gemm_atol(xp, ins, case) -> float:
    """8 K eps32 rms(A) rms(B_t): the fp32 accumulation before the output's rounding (labkit.chapters.ch06
    .tolerance, from the case's own decoded inputs)."""
    K = case.shape[2]
    return 8 * max(K, 1) * EPS32 * rms(xp, ins["A"]) * rms(xp, ins["B_t"]) + 1e-30


def cublas_baseline(ins, out, case):
    """C = A @ B_t^T through cuBLAS in bf16 on the case's inputs: labkit.chapters.ch07.cublas_bf16 (torch, the
    TN GEMM of nn.Linear) when torch is installed, else cublasGemmEx through CuPy. The worker checks its
    output against the reference either way."""
    if importlib.util.find_spec("torch") is not None:
        from ..chapters.ch07 import cublas_bf16
        cublas_bf16(ins["A"], ins["B_t"], out)
        return
    gemm_ex_bf16(ins["A"], ins["B_t"], out, b_transposed=True)


def _gemm_launch(k, ins, out, case, ctx):
    import cupy as cp
    M, N, K = case.shape
    ma, mb = _maps(ctx, (ins["A"], GEMM_BM), (ins["B_t"], GEMM_BN))
    if getattr(k, "max_dynamic_shared_size_bytes", None) != GEMM_SMEM:
        k.max_dynamic_shared_size_bytes = GEMM_SMEM
    k((-(-N // GEMM_BN), -(-M // GEMM_BM)), (GEMM_THREADS,), (ma, mb, out, cp.int32(M), cp.int32(N), cp.int32(K)),
      shared_mem=GEMM_SMEM)


def _gemm_flops(s):
    return 2 * s[0] * s[1] * s[2]


def _gemm_bytes(s):
    M, N, K = s
    return 2 * (M * K + N * K + M * N)


def _gemm_hidden(rng):
    """Fixed: one row and one K slice of 8, one tile with fewer K slices than stages, a tile and one more row
    and column chunk each way with a partial last slice, a deep K (129 slices, the ring wrapped 32 times), a
    wide and a tall edge; drawn: two shapes off the tile grid (N, K multiples of 8; M N K <= 5e8: the host
    reference stays cheap)."""
    def drawn():
        while True:
            s = (rng.randrange(1, 1200), 8 * rng.randrange(1, 150), 8 * rng.randrange(1, 300))
            if s[0] * s[1] * s[2] <= 5e8:
                return s
    return [(1, 8, 8), (128, 256, 128), (129, 264, 200), (64, 72, 8200), (100, 2056, 64), (1500, 40, 512),
            drawn(), drawn()]


wgmma_gemm = KernelTask(
    id="07.wgmma_gemm",
    title="bf16 GEMM on Hopper: a TMA ring with full/empty mbarriers, a producer warpgroup, two consumer "
          "warpgroups issuing wgmma",
    kernel="gemm_wgmma",
    signature='extern "C" __global__ void gemm_wgmma(const __grid_constant__ TmaDesc tmA, '
              'const __grid_constant__ TmaDesc tmB, unsigned short* C, int M, int N, int K)',
    source_var="gemm_wgmma_src",
    shapes=[(1, 8, 8), (128, 256, 64), (256, 512, 320), (333, 264, 200), (1000, 1000, 1008), (64, 72, 4096)],
    inputs=_gemm_inputs,
    reference=_gemm_reference,
    launch=_gemm_launch,
    out_shape=lambda s: (s[0], s[1]),
    out_dtype="bfloat16",
    bytes_moved=_gemm_bytes,
    flops=_gemm_flops,
    floor_peaks=("bf16_tflops",),
    launch_text="grid = (ceil(N / 256), ceil(M / 128)), block = 384 threads (3 warpgroups), dynamic shared "
                f"memory {GEMM_SMEM} bytes: one block per 128 x 256 tile of C. tmA and tmB are the tensor maps of "
                "A (128 x 64 boxes) and B_t (256 x 64 boxes), 128-byte swizzle, built by the grader. Contract: "
                "N % 8 == 0 and K % 8 == 0 (TMA's 16-byte rows); M, N, K otherwise any size (TMA zero-fills what "
                "overhangs, the given store skips it)",
    rtol=BF16_REL, atol=gemm_atol,
    speed_shape=SPEED_SHAPE, speed_threshold=WGMMA_SPEED_PCT,
    speed_baseline=cublas_baseline, baseline_name="cuBLAS bf16",
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_gemm_hidden,
    arch=ARCH,
    ref_temps=1,
)

TASKS = (numbers, tma_tile, wgmma_gemm)
