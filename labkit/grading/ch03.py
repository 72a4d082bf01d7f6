"""Chapter 03 exercises: coalescing numbers, a vectorised add with tails and misaligned pointers, and a
fused bias + GELU."""
from __future__ import annotations

import math

from .tasks import KernelTask, NumericTask, Question, plant, primes_between

numbers = NumericTask(
    id="03.numbers",
    title="Sectors, vectors and tails",
    answers_var="coalescing_answers",
    questions=[
        Question("sectors_coalesced", "32-byte sectors touched by one warp loading 32 consecutive floats", 4,
                 "32 threads x 4 bytes, in 32-byte sectors", rtol=0),
        Question("sectors_stride32", "sectors touched when thread t loads x[32 * t] (floats)", 32,
                 "each thread's float now lies in a sector of its own", rtol=0),
        Question("efficiency_stride2", "useful bytes / bytes fetched when thread t loads x[2 * t] (floats)", 0.5,
                 "half of each fetched sector is used", rtol=0.01),
        Question("bf16_per_128bit", "bf16 elements in one 128-bit load", 8, "128 bits = 16 bytes", rtol=0),
        Question("tail_1003", "elements left over for a scalar tail when n = 1003 bf16 are processed 8 at a time",
                 1003 % 8, "n modulo the vector width", rtol=0),
    ])

_VARIANT = {"all+1": "x, b, y 1 element past a 16-byte boundary", "x+1": "only x 1 element past a 16-byte boundary"}


# ------------------------------------------------------------------------------------ vec_add (bf16)

def _vec_inputs(case, gen):
    n = case.shape
    ox = 1 if case.variant in ("all+1", "x+1") else 0
    ob = 1 if case.variant == "all+1" else 0
    return {"x": (plant(gen.normal(n, "bf16", offset=ox), "bf16", SPECIALS_X), "bf16"),
            "b": (plant(gen.normal(n, "bf16", offset=ob), "bf16", SPECIALS_B, start=3), "bf16")}


SPECIALS_X = (float("nan"), float("inf"), float("-inf"), 1e30, -1e30, 1e-39, 3e38)
SPECIALS_B = (float("-inf"), float("nan"), 2.0, -1e30, 1e-39, float("inf"), -3e38)


def _vec_hidden(rng):
    """Fixed: tails of every length around one vector of 8, > 2^31 elements; drawn: a prime, and a
    multiple of 8 plus a random tail."""
    return [15, 17, 4099, 2 ** 31 + 11, primes_between(rng, 100_000, 5_000_000),
            8 * rng.randrange(1000, 100_000) + rng.randrange(1, 8)]


def _vec_reference(xp, ins, case):
    return ins["x"] + ins["b"]


def _vec_launch(k, ins, out, case, ctx):
    import cupy as cp
    k((ctx.sms * 8,), (256,), (ins["x"], ins["b"], out, cp.int64(case.shape)))


vec_add = KernelTask(
    id="03.vec_add",
    title="y = x + b with 128-bit loads, any n, any alignment",
    kernel="add_bf16_vec",
    signature='extern "C" __global__ void add_bf16_vec(const __nv_bfloat16* x, const __nv_bfloat16* b, '
              '__nv_bfloat16* y, long long n)',
    source_var="vec_add_src",
    shapes=[0, 1, 7, 8, 9, 1000, 65537, 1_000_003],
    inputs=_vec_inputs, reference=_vec_reference, launch=_vec_launch,
    out_shape=lambda n: (n,), out_dtype="bfloat16",
    bytes_moved=lambda n: 6 * n,
    launch_text="grid = 8 blocks per SM, 256 threads per block, whatever n is (n = 0 included)",
    speed_shape=2 ** 28, speed_threshold=90.0,
    points_correct=3, points_hidden=1, points_speed=2,
    variants=lambda n: [None, "all+1", "x+1"] if n else [None],
    variant_text=_VARIANT,
    out_offset=lambda variant: 1 if variant == "all+1" else 0,
    hidden_shapes=_vec_hidden,
    ref_temps=1,
    atol=0.03,       # fixed: the planted huge values would make a default atol (rtol x RMS) huge too
    flops=lambda n: n,
)


# --------------------------------------------------------------------------------- bias_gelu (bf16)

def _gelu_inputs(case, gen):
    rows, cols = case.shape
    # large |x| (tanh's argument overflows in fp32; e^(2u) / (e^(2u) + 1) gives inf / inf), infinities, NaN
    x = plant(gen.normal((rows, cols), "bf16", scale=1.5), "bf16",
              (float("nan"), float("inf"), 1e30, -1e30, 12.0, -12.0, 88.0, -88.0, 3e38, -3e38))
    return {"x": (x, "bf16"),
            "b": (gen.normal(cols, "bf16", scale=0.5), "bf16")}


def _gelu_reference(xp, ins, case):
    v = ins["x"] + ins["b"][None, :]
    return 0.5 * v * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v * v * v)))


def _gelu_hidden(rng):
    """Fixed: one row of 8, a prime number of columns, many short rows, more than 2^31 elements (the row
    times column product overflows an int); drawn: a prime by a prime."""
    return [(1, 8), (5, 12289), (1025, 8), (262145, 8192),
            (primes_between(rng, 10, 2000), primes_between(rng, 1000, 20000))]


def _gelu_launch(k, ins, out, case, ctx):
    import cupy as cp
    rows, cols = case.shape
    k((ctx.sms * 8,), (256,), (ins["x"], ins["b"], out, cp.int32(rows), cp.int32(cols)))


bias_gelu = KernelTask(
    id="03.bias_gelu",
    title="Fused bias + GELU (tanh form), bf16 in and out, fp32 math",
    kernel="bias_gelu",
    signature='extern "C" __global__ void bias_gelu(const __nv_bfloat16* x, const __nv_bfloat16* b, '
              '__nv_bfloat16* y, int rows, int cols)',
    source_var="bias_gelu_src",
    shapes=[(1, 1), (3, 7), (64, 4096), (257, 1000)],
    inputs=_gelu_inputs, reference=_gelu_reference, launch=_gelu_launch,
    out_shape=lambda s: tuple(s), out_dtype="bfloat16",
    bytes_moved=lambda s: 2 * (2 * s[0] * s[1] + s[1]),
    launch_text="grid = 8 blocks per SM, 256 threads per block, a 1-D grid over all rows x cols elements",
    speed_shape=(8192, 8192), speed_threshold=80.0,
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_gelu_hidden,
    ref_temps=6,
    atol=0.03,
    flops=lambda s: 10 * s[0] * s[1],
)

TASKS = (numbers, vec_add, bias_gelu)
