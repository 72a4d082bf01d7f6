"""Chapter 04 exercises: occupancy numbers, RMSNorm with a block reduction, and an online softmax for
rows too long for registers."""
from __future__ import annotations

from .tasks import KernelTask, NumericTask, Question, primes_between

numbers = NumericTask(
    id="04.numbers",
    title="Occupancy and reduction arithmetic (H200: 65536 registers, 2048 threads, 32 blocks per SM)",
    answers_var="occupancy_answers",
    questions=[
        Question("blocks_per_sm_40regs", "resident blocks per SM: 256 threads per block, 40 registers per thread",
                 65536 // (256 * 40), "the register file (65536 per SM) divided by the registers one block needs",
                 rtol=0),
        Question("occupancy_40regs", "the occupancy that gives (resident threads / 2048)", 6 * 256 / 2048,
                 "resident blocks x 256 threads, over 2048", rtol=0.01),
        Question("blocks_per_sm_512x32", "resident blocks per SM: 512 threads per block, 32 registers per thread",
                 min(2048 // 512, 65536 // (512 * 32)), "the smaller of the thread limit and the register limit",
                 rtol=0),
        Question("shfl_steps_warp", "__shfl_xor_sync steps to reduce 32 values in a warp", 5,
                 "each step halves the number of partial sums", rtol=0),
        Question("rmsnorm_bytes", "bytes moved by bf16 RMSNorm over 8192 x 4096 (x, w read, y written once)",
                 2 * (2 * 8192 * 4096 + 4096), "x and y are 8192 x 4096, w is 4096, 2 bytes each", rtol=1e-9),
    ])

EPS = 1e-6


# ---------------------------------------------------------------------------------- rmsnorm (bf16)

def _rms_inputs(case, gen):
    rows, cols = case.shape
    x = gen.normal((rows, cols), "bf16", scale=2.0)
    if rows >= 2:
        x[1, :] = 0                              # an all-zero row: 0 / sqrt(0) without eps
    if rows >= 3:
        x[2, :] = gen.normal(cols, "bf16", scale=3000.0)   # large magnitudes: squares summed in fp32
    if rows >= 4:
        x[3, :] = gen.normal(cols, "bf16", scale=1e-30)    # tiny ones: their squares underflow to 0
    return {"x": (x, "bf16"),
            "w": (gen.normal(cols, "bf16", scale=0.1, shift=1.0), "bf16")}


def _rms_reference(xp, ins, case):
    x = ins["x"]
    ms = (x * x).mean(axis=1, keepdims=True)
    return x / xp.sqrt(ms + EPS) * ins["w"][None, :]


def _rms_hidden(rng):
    """Fixed: one long prime row, a column count just under a multiple of 256, more than 2^31 elements
    (row * cols overflows an int); drawn: a prime number of rows by a prime number of columns."""
    return [(1, 100003), (64, 8191), (524290, 4097),
            (primes_between(rng, 5, 500), primes_between(rng, 300, 20000))]


def _rms_launch(k, ins, out, case, ctx):
    import cupy as cp
    rows, cols = case.shape
    if rows:
        k((rows,), (256,), (ins["x"], ins["w"], out, cp.int32(rows), cp.int32(cols), cp.float32(EPS)))


rmsnorm = KernelTask(
    id="04.rmsnorm",
    title="RMSNorm: one block of 256 threads per row",
    kernel="rmsnorm",
    signature='extern "C" __global__ void rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* w, '
              '__nv_bfloat16* y, int rows, int cols, float eps)',
    source_var="rmsnorm_src",
    shapes=[(1, 1), (3, 7), (5, 4096), (17, 4095)],
    inputs=_rms_inputs, reference=_rms_reference, launch=_rms_launch,
    out_shape=lambda s: tuple(s), out_dtype="bfloat16",
    bytes_moved=lambda s: 2 * (2 * s[0] * s[1] + s[1]),
    launch_text="one block of 256 threads per row: grid = rows, eps = 1e-6. Row 1 (when there is one) is all "
                "zeros, row 2 has values near 3000, row 3 values near 1e-30",
    speed_shape=(8192, 4096), speed_threshold=80.0,
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_rms_hidden,
    ref_temps=4,
    atol=0.02,
    flops=lambda s: 4 * s[0] * s[1],
)


# ------------------------------------------------------------------------- online softmax (fp32)

def _sm_inputs(case, gen):
    import cupy as cp
    rows, cols = case.shape
    x = gen.normal((rows, cols), "f32", scale=3.0)
    if rows >= 2:
        x[1, :] = -cp.inf                        # a fully masked row: NaN out, like torch
    if rows >= 3:
        x[2, ::3] = -cp.inf                      # a partly masked row
    if rows >= 4:
        x[3, :] = x[3, :] * 1000.0 + 5000.0      # large magnitudes: exp overflows without the max
    if rows >= 5:
        x[4, cols // 2] = cp.nan                 # a NaN: the whole row is NaN, like torch
    return {"x": (x, "f32")}


def _sm_reference(xp, ins, case):
    x = ins["x"]
    m = x.max(axis=1, keepdims=True)
    e = xp.exp(x - m)                            # a fully masked row: -inf - -inf = NaN, as in torch
    return e / e.sum(axis=1, keepdims=True)


def _sm_hidden(rng):
    """Fixed: rows longer than 2^21, a single row of 513, masked rows (64 rows); drawn: a prime length."""
    return [(3, 2000003), (1, 513), (64, 12345), (8, primes_between(rng, 100_000, 3_000_000))]


def _sm_launch(k, ins, out, case, ctx):
    import cupy as cp
    rows, cols = case.shape
    if rows:
        k((rows,), (512,), (ins["x"], out, cp.int32(rows), cp.int64(cols)))


online_softmax = KernelTask(
    id="04.online_softmax",
    title="Softmax over rows too long for registers: online max and sum",
    kernel="softmax_long",
    signature='extern "C" __global__ void softmax_long(const float* x, float* y, int rows, long long cols)',
    source_var="softmax_long_src",
    shapes=[(1, 1), (2, 5), (4, 1000), (5, 4097), (6, 1_000_003)],
    inputs=_sm_inputs, reference=_sm_reference, launch=_sm_launch,
    out_shape=lambda s: tuple(s), out_dtype="float32",
    bytes_moved=lambda s: 8 * s[0] * s[1],
    launch_text="one block of 512 threads per row: grid = rows. Row 1 (when there is one) is all -inf, "
                "row 2 has every third element -inf, row 3 has values near 5000, row 4 holds a NaN",
    speed_shape=None, speed_threshold=None,
    points_correct=4, points_hidden=1, points_speed=0,
    rtol=1e-4,   # fp32 sums over a million terms: 1e-5 would flag the rounding of a correct kernel
    hidden_shapes=_sm_hidden,
    ref_temps=4,
    flops=lambda s: 5 * s[0] * s[1],
)

TASKS = (numbers, rmsnorm, online_softmax)
