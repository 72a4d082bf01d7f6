"""Chapter 10 exercises: the numbers of a cross-entropy over a large vocabulary, and the fused forward and
backward kernel itself (loss per row and the gradient, one block per row), graded on correctness, hidden
shapes and speed as a fraction of a copy of the bytes it must move."""
from __future__ import annotations

import functools
import math

import numpy as np

from .tasks import KernelTask, NumericTask, Question, primes_between

IGNORE_INDEX = -100
THREADS = 512
SPEED_SHAPE = (4096, 32000)
CE_SPEED_PCT = 65.0          # the reference solution: 74.3% of copy three times over on the H200 (test_speed_bars_gpu)

numbers = NumericTask(
    id="10.numbers",
    title="Cross-entropy over a large vocabulary (H200: 132 SMs, 60 MB of L2)",
    answers_var="ce_answers",
    questions=[
        Question("logits_gb", "GB (10^9 bytes) of bf16 logits for 4096 tokens and a vocabulary of 128256",
                 4096 * 128256 * 2 / 1e9, "N x V x 2 bytes", rtol=1e-3),
        Question("floor_gb", "GB a kernel writing the gradient must move at least (same logits)",
                 2 * 4096 * 128256 * 2 / 1e9, "the logits read once and the gradient written once", rtol=1e-3),
        Question("rows_in_flight_mb", "MB (10^6 bytes) of rows in flight with one block per SM, each on its own row",
                 132 * 128256 * 2 / 1e6, "132 rows of 128256 bf16", rtol=1e-3),
        Question("blocks_per_sm_fit", "the most blocks per SM (each on its own row) whose rows all fit in 60 MB of L2",
                 math.floor(60e6 / (132 * 128256 * 2)), "60 MB over the MB of one row per SM, rounded down", rtol=0),
        Question("merged_lse", "lse of a row from two partial states (m1, d1) = (2, 3) and (m2, d2) = (5, 1), "
                 "d = sum of exp(x - m) over each part", 5 + math.log(1 + 3 * math.exp(-3)),
                 "M = max(m1, m2) = 5; d = 3 e^(2 - 5) + 1 e^(5 - 5); lse = M + ln d", rtol=1e-5),
        Question("grad_at_target", "the gradient at the target of one row with softmax probability 0.25 there, "
                 "mean over 8 rows not ignored", (0.25 - 1) / 8, "(p_t - 1) x 1/8", rtol=1e-9),
    ])


# ------------------------------------------------------------------------------ fused cross-entropy

def targets(shape, seed: int) -> np.ndarray:
    """int32 targets of a case: row 0 class 0, row 1 class V - 1, every 7th row from row 3 ignored, the rest
    drawn."""
    rows, V = shape
    rs = np.random.default_rng(seed)
    t = rs.integers(0, V, rows).astype(np.int32)
    t[:1] = 0
    t[1:2] = V - 1
    t[3::7] = IGNORE_INDEX
    return t


def _ce_inputs(case, gen):
    import cupy as cp
    from ..measure import bf16
    rows, V = case.shape
    x = gen.normal((rows, V), "bf16", scale=3.0)
    if rows >= 3 and V >= 3:
        x[2, 1] = bf16.to_bits(cp.asarray([3.0e38], dtype=cp.float32))[0]   # near the bf16 maximum
        x[2, 2] = np.uint16(0xFF80)                                          # -inf: exp = 0
    if rows >= 5:
        x[4, :] = bf16.to_bits(bf16.from_bits(x[4, :]) * 300.0)              # magnitudes ~1000: exp overflows
    return {"x": (x, "bf16"), "target": (cp.asarray(targets(case.shape, case.seed)), "i32")}


@functools.lru_cache(maxsize=64)
def scale_of(shape, seed: int) -> float:
    """1 / the rows of a case not ignored (0 when none is): from the host's targets, so that a timed launch
    waits on nothing."""
    n = int((targets(shape, seed) != IGNORE_INDEX).sum())
    return 1.0 / n if n else 0.0


def _ce_verify(ins, case):
    from ..chapters import ch10
    from ..measure import bf16
    x, t = ins["x"][0], ins["target"][0]
    ref = ch10.reference(x, t)

    def check(outs):
        if not isinstance(outs, dict):
            outs = {"grad": outs}
        grad = bf16.from_bits(outs["grad"]).astype(np.float64)
        loss = outs["loss"].astype(np.float64) if "loss" in outs else ref[0]
        problems = ch10.mismatches(loss, ref[1], grad, None, ref)
        return "; ".join(problems) or None
    return check


def _ce_outputs(shape):
    rows, V = shape
    return (("grad", (rows, V), "bfloat16"), ("loss", (rows,), "float32"))


def _ce_launch(k, ins, out, case, ctx):
    import cupy as cp
    rows, V = case.shape
    if rows:
        k((rows,), (THREADS,), (ins["x"], ins["target"], out["grad"], out["loss"], cp.int32(V),
                                cp.float32(scale_of(tuple(case.shape), case.seed))))


def _ce_bytes(s):
    rows, V = s
    return 4 * rows * V + 8 * rows


def _ce_ref_bytes(s):
    """The reference's fp64 copies on the GPU: x, its exponentials and the gradient, with slack."""
    rows, V = s
    return 4 * 8 * rows * V + (64 << 20)


def _ce_hidden(rng):
    """Fixed: one very long row, a vocabulary that is not a multiple of 8, GPT-2's 50257, Llama 3's 128256;
    drawn: a prime number of rows by a prime vocabulary."""
    return [(1, 1_000_003), (64, 4099), (33, 50257), (16, 128256),
            (primes_between(rng, 5, 300), primes_between(rng, 1000, 40000))]


_CE_SIG = ('extern "C" __global__ void cross_entropy(const unsigned short* x, const int* target, '
           'unsigned short* grad, float* loss, int V, float scale)')

cross_entropy = KernelTask(
    id="10.cross_entropy",
    title="Cross-entropy forward and backward in one kernel: the loss of each row and the gradient",
    kernel="cross_entropy",
    signature=_CE_SIG,
    source_var="cross_entropy_src",
    shapes=[(1, 1), (3, 7), (5, 1000), (9, 4104), (4, 32000)],
    inputs=_ce_inputs, reference=None, verify=_ce_verify, outputs=_ce_outputs,
    launch=_ce_launch,
    out_shape=lambda s: tuple(s), out_dtype="bfloat16",
    bytes_moved=_ce_bytes, ref_bytes=_ce_ref_bytes,
    flops=lambda s: 8 * s[0] * s[1],
    launch_text=f"grid = rows blocks of {THREADS} threads, no dynamic shared memory: block r owns row r. Contract: "
                "x (rows, V) bf16 logits, target (rows) int32 in [0, V) or -100 (ignored: loss 0 and a zero "
                "gradient row), loss (rows) fp32 = log sum_j exp(x[r, j]) - x[r, target[r]], grad (rows, V) bf16 "
                "= (exp(x[r, j] - lse_r) - [j == target[r]]) * scale, scale = 1 / (rows not ignored). Row 2 holds "
                "a logit near the bf16 maximum and a -inf, row 4 magnitudes near 1000; every 7th row from row 3 "
                "is ignored",
    speed_shape=SPEED_SHAPE, speed_threshold=CE_SPEED_PCT,
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_ce_hidden,
)

TASKS = (numbers, cross_entropy)
