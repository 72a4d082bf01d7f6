"""Chapter 06 exercises: the m16n8k16 fragment layouts, one mma.sync per 16 x 8 tile of C from global memory,
and a bf16 GEMM with ldmatrix, cp.async and mma.sync timed against cuBLAS bf16 in the same grade.

Every shape is (M, N, K): C (M x N) = A (M x K) @ B (K x N), all row-major; A and B are bf16 (CuPy uint16 bit
patterns, labkit.measure.bf16), the products accumulated in fp32. The reference is A @ B in float64 from the
exact bf16 values (the worker decodes the bit patterns), on the host for small outputs and on the GPU for large
ones (the worker's rule).

Tolerances, per case from its own inputs:
- 06.mma_tile stores fp32: |c - ref| <= 4 K eps32 rms(A) rms(B) + eps32 |ref| (chapter 05's bound). The bf16
  products are exact in fp32, so what is left is the fp32 accumulation; a C rounded to bf16 (2^-8 relative)
  or one k16 step left out is far outside it.
- 06.mma_gemm stores bf16: |c - ref| <= 8 K eps32 rms(A) rms(B) + 2^-8 |ref|: one rounding of the fp32 result
  to bf16 (half a bf16 ulp, at most 2^-8 relative) on top of the accumulation. A kernel that rounds its
  accumulators to bf16 along the way (64 roundings at K = 1024) or drops a k-step is outside it.

The fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type",
https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-fragment-mma-16816-float):
lane = 4 groupID + threadID_in_group; the formulas below (a_place, b_place, c_place) are this module's own,
and tests/test_ch06_grading.py checks them against labkit.chapters.ch06's fragment tables.

Hard inputs: A and B are views at the start of larger allocations whose rest is NaN (bf16 0x7FC0): a kernel
that reads past the end of A or B (one k16 step or k-tile too many, a row past M) gets NaN into C.
"""
from __future__ import annotations

import importlib.util

import numpy as np

from .ch05 import rms
from .tasks import KernelTask, NumericTask, Question

EPS32 = float(np.finfo(np.float32).eps)
BF16_REL = 2.0 ** -8               # one rounding to bf16 (8 significant bits): at most half an ulp, 2^-8 relative

# The speed bar of 06.mma_gemm, % of cuBLAS bf16 measured in the same grade at SPEED_SHAPE.
# An ESTIMATE, not a measurement: MUST BE SET FROM THE H200 MEASUREMENT of the reference solution (the
# notebook's gemm_mma: grade it, read its "% of cuBLAS bf16"), at about 0.75 x that figure (a margin for
# run-to-run spread and a busy GPU), and the notebook's markdown with it (a CPU test checks they agree).
# Estimate: cuBLAS bf16 runs at ~790 TFLOP/s on an H200 at 4096^3 (wgmma kernels); an mma.sync kernel tops
# out near 2/3 of the wgmma rate. One helper's check grade of the reference (128 x 128 x 32 tiles, 8 warps of
# 64 x 32, a 3-stage cp.async ring, swizzled shared memory, 125 registers, no spills) on an H200 read 41.0%
# and 43.1% of cuBLAS bf16 (324 and 342 vs 789 and 795 TFLOP/s): 0.75 x 41% gives the bar of 30%, to be
# confirmed by the lead's grade on the runner.
MMA_GEMM_SPEED_PCT = 30.0
SPEED_SHAPE = (4096, 4096, 4096)

# the contract of 06.mma_gemm (the block tile of the reference; stated in the notebook)
GEMM_BM, GEMM_BN, GEMM_BK = 128, 128, 32

# NaN after each input: rows of K past A, rows of N past B, plus a tail
A_PAD_ROWS, B_PAD_ROWS, PAD_TAIL = 16, 32, 128
BF16_NAN = 0x7FC0


# ------------------------------------------------------------------------------- fragment layouts

def a_place(r: int, c: int) -> tuple[int, int]:
    """(lane, element 0-7) holding A[r][c] of the 16 x 16 A tile: row r = groupID (+8 for a2 a3, a6 a7),
    column 2 threadID_in_group + (0 | 1), +8 for a4-a7."""
    g, t = r % 8, (c % 8) // 2
    return 4 * g + t, (c % 2) + 2 * (r >= 8) + 4 * (c >= 8)


def b_place(k: int, n: int) -> tuple[int, int]:
    """(lane, element 0-3) holding B[k][n] of the 16 x 8 B tile: column n = groupID, row (k) 2 threadID_in_group
    + (0 | 1), +8 for b2 b3."""
    t = (k % 8) // 2
    return 4 * n + t, (k % 2) + 2 * (k >= 8)


def c_place(r: int, n: int) -> tuple[int, int]:
    """(lane, element 0-3) holding C[r][n] of the 16 x 8 fp32 C/D tile: row groupID (+8 for c2 c3), column
    2 threadID_in_group + (0 | 1)."""
    return 4 * (r % 8) + n // 2, (n % 2) + 2 * (r >= 8)


def fragment_table(place, rows: int, cols: int, per_lane: int) -> list[list[tuple[int, int]]]:
    """For each lane, its elements' (row, col) in element order: what `place` gives, inverted."""
    table = [[None] * per_lane for _ in range(32)]
    for r in range(rows):
        for c in range(cols):
            lane, e = place(r, c)
            table[lane][e] = (r, c)
    return table


A_Q, B_Q, C_Q = (9, 13), (11, 5), (12, 7)       # the elements the questions ask about

fragments = NumericTask(
    id="06.fragments",
    title="The m16n8k16 bf16 fragments, ldmatrix and the tile budget (PTX ISA, warp-level mma.m16n8k16 "
          "fragments; lane = 4 groupID + threadID_in_group)",
    answers_var="fragment_answers",
    questions=[
        Question("a_lane", f"the lane that holds A[{A_Q[0]}][{A_Q[1]}] of the 16 x 16 A tile", a_place(*A_Q)[0],
                 "A's row is groupID or groupID + 8, its column 2 threadID_in_group (+1), +8 for the right half; "
                 "lane = 4 groupID + threadID_in_group", rtol=0),
        Question("a_element", f"which of that lane's 8 bf16 A values (a0-a7, answer 0-7) is A[{A_Q[0]}][{A_Q[1]}]",
                 a_place(*A_Q)[1], "a0 a1: row groupID, columns 2t, 2t+1; a2 a3: row + 8; a4 a5: columns + 8; "
                 "a6 a7: both", rtol=0),
        Question("b_lane", f"the lane that holds B[{B_Q[0]}][{B_Q[1]}] of the 16 x 8 B tile (k x n)",
                 b_place(*B_Q)[0], "B's column n is groupID, its row k is 2 threadID_in_group (+1), +8 for b2 b3",
                 rtol=0),
        Question("b_element", f"which of that lane's 4 bf16 B values (b0-b3, answer 0-3) is B[{B_Q[0]}][{B_Q[1]}]",
                 b_place(*B_Q)[1], "b0 b1: k = 2t, 2t+1; b2 b3: k + 8", rtol=0),
        Question("c_lane", f"the lane that holds C[{C_Q[0]}][{C_Q[1]}] of the 16 x 8 fp32 accumulator",
                 c_place(*C_Q)[0], "C's row is groupID (c0 c1) or groupID + 8 (c2 c3), its column 2t or 2t+1",
                 rtol=0),
        Question("c_element", f"which of that lane's 4 fp32 values (c0-c3, answer 0-3) is C[{C_Q[0]}][{C_Q[1]}]",
                 c_place(*C_Q)[1], "c0 c1: row groupID, columns 2t, 2t+1; c2 c3: row groupID + 8", rtol=0),
        Question("fragment_registers", "32-bit registers one thread uses for its A, B and C fragments of one "
                 "m16n8k16 (A + B + C)", 4 + 2 + 4,
                 "A holds 8 bf16 values and B 4, two to a 32-bit register; C holds 4 fp32 values, one each", rtol=0),
        Question("mma_flops", "floating-point operations of one mma.sync m16n8k16", 2 * 16 * 8 * 16,
                 "a multiply and an add for each (m, n, k) of 16 x 8 x 16", rtol=0),
        Question("ldmatrix_x4_bytes", "bytes of shared memory one ldmatrix.x4 moves for the whole warp",
                 4 * 8 * 16, "4 matrices of 8 x 8 b16 values; each lane receives one 32-bit word of each", rtol=0),
        Question("smem_stage_bytes", "shared memory in bytes of one pipeline stage of a 128 x 256 x 32 bf16 tile "
                 "pair (BM = 128, BN = 256, BK = 32; no padding)", (128 * 32 + 32 * 256) * 2,
                 "one BM x BK slab of A and one BK x BN slab of B, 2 bytes per bf16", rtol=0),
        Question("mma_per_k16_64x64", "mma.sync instructions one warp issues per k16 step for a 64 x 64 warp tile",
                 (64 // 16) * (64 // 8), "the warp tile in m16 x n8 pieces: (64 / 16) x (64 / 8)", rtol=0),
    ])


# ----------------------------------------------------------------------------------- shared pieces

def padded_bf16(gen, rows: int, cols: int, pad: int):
    """A rows x cols bf16 (uint16 bits) random normal matrix at the start of an allocation (16-byte
    aligned) whose next `pad` elements are NaN."""
    import cupy as cp
    n = rows * cols
    raw = gen.normal(n + pad, "bf16")
    raw[n:] = cp.uint16(BF16_NAN)
    return raw[:n].reshape(rows, cols)


def _inputs(case, gen):
    M, N, K = case.shape
    A = padded_bf16(gen, M, K, A_PAD_ROWS * K + PAD_TAIL)
    B = padded_bf16(gen, K, N, B_PAD_ROWS * N + PAD_TAIL)
    return {"A": (A, "bf16"), "B": (B, "bf16")}


def _reference(xp, ins, case):
    return ins["A"] @ ins["B"]


def tile_atol(xp, ins, case) -> float:
    """06.mma_tile (fp32 out): 4 K eps32 rms(A) rms(B), from the case's own (decoded) inputs."""
    K = case.shape[2]
    return 4 * max(K, 1) * EPS32 * rms(xp, ins["A"]) * rms(xp, ins["B"]) + 1e-30


def gemm_atol(xp, ins, case) -> float:
    """06.mma_gemm (bf16 out): 8 K eps32 rms(A) rms(B), the accumulation before the output's rounding."""
    K = case.shape[2]
    return 8 * max(K, 1) * EPS32 * rms(xp, ins["A"]) * rms(xp, ins["B"]) + 1e-30


# cuBLAS through CuPy: cublasGemmEx on bf16 data with fp32 compute (CUDA_R_16BF = 14, CUBLAS_COMPUTE_32F = 68,
# CUBLAS_GEMM_DEFAULT = -1); used when torch is not installed
_R_16BF, _COMPUTE_32F, _GEMM_DEFAULT = 14, 68, -1


def gemm_ex_bf16(A, B, C, b_transposed: bool = False):
    """C = A @ B (or A @ B^T when `b_transposed`: B given as N x K, the TN GEMM of nn.Linear), row-major bf16
    bits, fp32 accumulation, through cublasGemmEx. In column-major terms C^T (N x M) = B^T A^T, so B goes
    first: a row-major K x N B is column-major N x K as stored (op N, ld N); a row-major N x K B_t is
    column-major K x N, transposed (op T, ld K); A^T (K x M) is A as stored (op N, ld K); ldc = N."""
    import cupy as cp
    from cupy.cuda import cublas, device
    M, K = A.shape
    N = B.shape[0] if b_transposed else B.shape[1]
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    handle = device.get_cublas_handle()
    cublas.setStream(handle, cp.cuda.get_current_stream().ptr)
    op_b, ld_b = (cublas.CUBLAS_OP_T, K) if b_transposed else (cublas.CUBLAS_OP_N, N)
    cublas.gemmEx(handle, op_b, cublas.CUBLAS_OP_N, N, M, K, one.ctypes.data,
                  B.data.ptr, _R_16BF, ld_b, A.data.ptr, _R_16BF, K, zero.ctypes.data,
                  C.data.ptr, _R_16BF, N, _COMPUTE_32F, _GEMM_DEFAULT)


def cublas_baseline(ins, out, case):
    """C = A @ B in bf16 through cuBLAS on the case's inputs: labkit.chapters.ch06.cublas_bf16 (torch.matmul on
    bf16 tensors) when torch is installed, else cublasGemmEx through CuPy (the same library; CuPy has no bf16
    dtype, but its cuBLAS binding takes bf16 buffers). The worker checks the baseline's output against the
    reference either way."""
    if importlib.util.find_spec("torch") is not None:
        from ..chapters.ch06 import cublas_bf16
        cublas_bf16(ins["A"], ins["B"], out)
        return
    gemm_ex_bf16(ins["A"], ins["B"], out)


def _flops(s):
    return 2 * s[0] * s[1] * s[2]


def _bytes_tile(s):
    M, N, K = s
    return 2 * (M * K + K * N) + 4 * M * N


def _bytes_gemm(s):
    M, N, K = s
    return 2 * (M * K + K * N + M * N)


def _signature(name: str, bf16: str, out: str) -> str:
    return (f'extern "C" __global__ void {name}(const {bf16}* A, const {bf16}* B, {out}* C, int M, int N, int K)')


_COMMON = dict(inputs=_inputs, reference=_reference, out_shape=lambda s: (s[0], s[1]), flops=_flops,
               ref_temps=1, floor_peaks=("bf16_tflops",))


# ------------------------------------------------------------------ one mma.sync per 16 x 8 tile of C

def _tile_launch(k, ins, out, case, ctx):
    import cupy as cp
    M, N, K = case.shape
    if M and N:
        k((N // 8, M // 16), (32,), (ins["A"], ins["B"], out, cp.int32(M), cp.int32(N), cp.int32(K)))


def _tile_hidden(rng):
    """Fixed: one tile and one k-step, a few tiles with K of 3 steps, 9 tiles across N, a deep K (64 steps);
    drawn: two shapes of random multiples of the tile."""
    def drawn():
        return (16 * rng.randrange(1, 17), 8 * rng.randrange(1, 33), 16 * rng.randrange(1, 65))
    return [(16, 8, 16), (32, 64, 48), (128, 72, 256), (48, 40, 1024), drawn(), drawn()]


mma_tile = KernelTask(
    id="06.mma_tile",
    title="One warp, one 16 x 8 tile of C: mma.sync.m16n8k16 bf16 from global memory",
    kernel="mma_tile",
    signature=_signature("mma_tile", "unsigned short", "float"),
    source_var="mma_tile_src",
    shapes=[(16, 8, 16), (16, 16, 32), (64, 24, 80), (96, 128, 512), (32, 8, 1024)],
    launch=_tile_launch,
    launch_text="grid = (N / 8, M / 16), block = 32 threads (one warp): block (x, y) computes the 16 x 8 tile of "
                "C at rows 16y..16y+15, columns 8x..8x+7",
    out_dtype="float32", bytes_moved=_bytes_tile, rtol=EPS32, atol=tile_atol,
    points_correct=3, points_hidden=1, points_speed=0,
    hidden_shapes=_tile_hidden,
    **_COMMON,
)


# ------------------------------------------------------------------- ldmatrix + cp.async + mma.sync GEMM

def _gemm_launch(k, ins, out, case, ctx):
    import cupy as cp
    M, N, K = case.shape
    if M and N:
        k((N // GEMM_BN, M // GEMM_BM), (256,), (ins["A"], ins["B"], out, cp.int32(M), cp.int32(N), cp.int32(K)))


def _gemm_hidden(rng):
    """Fixed: one block tile and one k-tile (fewer k-tiles than the ring has stages), two k-tiles, a tall one
    with a deep K (64 k-tiles), a wide one, a 16 x 16 grid of tiles with the shallowest K; drawn: two shapes of
    random multiples of the tile (M N K <= 5e8: the host reference stays cheap)."""
    def drawn():
        while True:
            s = (GEMM_BM * rng.randrange(1, 9), GEMM_BN * rng.randrange(1, 9), GEMM_BK * rng.randrange(1, 65))
            if s[0] * s[1] * s[2] <= 5e8:
                return s
    return [(128, 128, 32), (128, 128, 64), (1024, 128, 2048), (128, 1024, 96), (2048, 2048, 32),
            drawn(), drawn()]


mma_gemm = KernelTask(
    id="06.mma_gemm",
    title="bf16 GEMM on Tensor Cores: 128 x 128 x 32 block tiles, ldmatrix, a cp.async ring, mma.sync",
    kernel="gemm_mma",
    signature=_signature("gemm_mma", "__nv_bfloat16", "__nv_bfloat16"),
    source_var="gemm_mma_src",
    shapes=[(128, 128, 32), (256, 128, 64), (128, 384, 160), (384, 256, 1024), (512, 512, 512)],
    launch=_gemm_launch,
    launch_text="grid = (N / 128, M / 128), block = 256 threads (8 warps), no dynamic shared memory: one block "
                "per 128 x 128 tile of C. Contract: M % 128 == 0, N % 128 == 0, K % 32 == 0 (every shape the "
                "grader runs, public and hidden, keeps it)",
    out_dtype="bfloat16", bytes_moved=_bytes_gemm, rtol=BF16_REL, atol=gemm_atol,
    speed_shape=SPEED_SHAPE, speed_threshold=MMA_GEMM_SPEED_PCT,
    speed_baseline=cublas_baseline, baseline_name="cuBLAS bf16",
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_gemm_hidden,
    **_COMMON,
)

TASKS = (fragments, mma_tile, mma_gemm)
