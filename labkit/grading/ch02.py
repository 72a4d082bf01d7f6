"""Chapter 02 exercises: launch arithmetic, y = x + b for any n, and a bias added along columns."""
from __future__ import annotations

from .tasks import KernelTask, NumericTask, Question, plant, primes_between

numbers = NumericTask(
    id="02.numbers",
    title="Launch arithmetic",
    answers_var="launch_answers",
    questions=[
        Question("blocks_65537", "blocks of 256 threads for n = 65537, one element per thread", 257,
                 "ceil(n / 256): the last, partial block counts too", rtol=0),
        Question("idle_threads_65537", "threads of that grid with no element (they fail `i < n`)", 257 * 256 - 65537,
                 "threads launched minus n", rtol=0),
        Question("first_bad_index", "the first index that a 32-bit signed int cannot hold", 2 ** 31,
                 "an int holds -2**31 .. 2**31 - 1", rtol=0),
        Question("resident_threads_h200", "threads resident at once on an H200 (132 SMs, at most 2048 threads each)",
                 132 * 2048, "SMs times resident threads per SM", rtol=0),
    ])


# --------------------------------------------------------------------------------- add_any_n (bf16)

# NaN and infinities propagate; huge and subnormal bf16 values are added in fp32 like any other
SPECIALS_X = (float("nan"), float("inf"), float("-inf"), 1e30, -1e30, 1e-39, 3e38)
SPECIALS_B = (float("-inf"), float("nan"), 2.0, -1e30, 1e-39, float("inf"), -3e38)


def _add_inputs(case, gen):
    n = case.shape
    return {"x": (plant(gen.normal(n, "bf16"), "bf16", SPECIALS_X), "bf16"),
            "b": (plant(gen.normal(n, "bf16"), "bf16", SPECIALS_B, start=5), "bf16")}


def _add_hidden(rng):
    """Fixed: tiny sizes, one past a block, > 2^31 elements (32-bit indices overflow); drawn: a prime."""
    return [3, 511, 2 ** 31 + 3, primes_between(rng, 100_000, 5_000_000)]


def _add_reference(xp, ins, case):
    return ins["x"] + ins["b"]


def _add_launch(k, ins, out, case, ctx):
    import cupy as cp
    n = case.shape
    if n:   # a grid of 0 blocks is not a launch
        k(((n + 255) // 256,), (256,), (ins["x"], ins["b"], out, cp.int64(n)))


add_any_n = KernelTask(
    id="02.add_any_n",
    title="y = x + b in bf16 for any n",
    kernel="add_bf16",
    signature='extern "C" __global__ void add_bf16(const __nv_bfloat16* x, const __nv_bfloat16* b, '
              '__nv_bfloat16* y, long long n)',
    source_var="add_bf16_src",
    shapes=[0, 1, 2, 255, 257, 65537],
    inputs=_add_inputs, reference=_add_reference, launch=_add_launch,
    out_shape=lambda n: (n,), out_dtype="bfloat16",
    bytes_moved=lambda n: 6 * n,
    launch_text="one element per thread: 256 threads per block, ceil(n / 256) blocks (no launch for n = 0)",
    # speed is measured and shown for information only: one 2-byte element per thread reaches about half
    # of the copy bandwidth (chapter 03 is where it gets fast), so this task has no speed points
    speed_shape=2 ** 28, speed_threshold=None,
    points_correct=3, points_hidden=2, points_speed=0,
    hidden_shapes=_add_hidden,
    ref_temps=1,
    atol=0.03,       # fixed: the planted huge values would make a default atol (rtol x RMS) huge too
)


# ------------------------------------------------------------------------------ bias_cols (fp32, 2-D)

def _bias_inputs(case, gen):
    rows, cols = case.shape
    return {"x": (plant(gen.normal((rows, cols), "f32"), "f32", (float("nan"), float("inf"), 1e38, -1e38)), "f32"),
            "b": (plant(gen.normal(cols, "f32"), "f32", (float("-inf"), 1e-40), min_size=16), "f32")}


def _bias_hidden(rng):
    """Fixed: a single row or column, non-multiples of the 16 x 16 block; drawn: a prime by a prime."""
    return [(4097, 1), (1, 4097), (33, 17), (2, 70001),
            (primes_between(rng, 100, 3000), primes_between(rng, 100, 3000))]


def _bias_reference(xp, ins, case):
    return ins["x"] + ins["b"][None, :]


def _bias_launch(k, ins, out, case, ctx):
    import cupy as cp
    rows, cols = case.shape
    if rows and cols:
        k(((cols + 15) // 16, (rows + 15) // 16), (16, 16),
          (ins["x"], ins["b"], out, cp.int32(rows), cp.int32(cols)))


bias_cols = KernelTask(
    id="02.bias_cols",
    title="y[r, c] = x[r, c] + b[c] on a 2-D grid",
    kernel="add_bias_cols",
    signature='extern "C" __global__ void add_bias_cols(const float* x, const float* b, float* y, '
              'int rows, int cols)',
    source_var="bias_cols_src",
    shapes=[(1, 1), (3, 5), (17, 33), (1000, 999)],
    inputs=_bias_inputs, reference=_bias_reference, launch=_bias_launch,
    out_shape=lambda s: tuple(s), out_dtype="float32",
    bytes_moved=lambda s: 4 * (2 * s[0] * s[1] + s[1]),
    launch_text="blocks of 16 x 16 threads; grid = (ceil(cols / 16), ceil(rows / 16)): x runs along "
                "columns, y along rows",
    speed_shape=(8192, 8192), speed_threshold=None,
    points_correct=3, points_hidden=1, points_speed=0,
    hidden_shapes=_bias_hidden,
    ref_temps=1,
    atol=2e-5,
)

TASKS = (numbers, add_any_n, bias_cols)
