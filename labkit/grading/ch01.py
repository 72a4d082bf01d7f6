"""Chapter 01 exercises: the roofline numbers, and a grid-stride copy probe."""
from __future__ import annotations

from ..measure.ceilings import DATASHEET
from .tasks import KernelTask, NumericTask, Question, plant, primes_between

H200 = DATASHEET["H200"]
BW = H200["bandwidth_gbps"] * 1e9          # bytes/s
BF16 = H200["bf16_tflops"] * 1e12          # FLOP/s

N_ADD = 2 ** 28
ADD_BYTES = 3 * 2 * N_ADD                  # x and b read, y written, 2 bytes each
G = 4096
GEMM_FLOPS = 2 * G ** 3
GEMM_BYTES = 3 * G * G * 2                 # A and B read once, C written once, all bf16
SOFTMAX_BYTES = 2 * 4 * 8192 * 8192        # fp32, read once, written once

numbers = NumericTask(
    id="01.numbers",
    title="Two numbers first: bytes, FLOPs and the floor time on a datasheet H200",
    answers_var="roofline_answers",
    questions=[
        Question("add_bytes", "bf16 y = x + b over 2**28 elements: bytes moved (each tensor read or written once)",
                 ADD_BYTES, "count every tensor the kernel reads or writes (x, b, y) at 2 bytes per bf16 element",
                 rtol=1e-9, unit="B"),
        Question("add_flop_per_byte", "its arithmetic intensity, FLOP per byte", N_ADD / ADD_BYTES,
                 "one addition per element, divided by the bytes above", unit="FLOP/B"),
        Question("add_floor_us", "its floor time at the datasheet's 4.8 TB/s, in microseconds",
                 ADD_BYTES / BW * 1e6, "bytes / (4.8e12 bytes/s), then in microseconds (1 s = 1e6 us)",
                 unit="us"),
        Question("gemm_flops", "bf16 GEMM C = A B with M = N = K = 4096: FLOPs", GEMM_FLOPS,
                 "a multiply and an add for each of the M*N*K products", rtol=1e-9, unit="FLOP"),
        Question("gemm_bytes", "its minimal bytes: A and B read once, C written once, all bf16", GEMM_BYTES,
                 "three 4096 x 4096 matrices of 2-byte elements", rtol=1e-9, unit="B"),
        Question("gemm_flop_per_byte", "its arithmetic intensity at those minimal bytes", GEMM_FLOPS / GEMM_BYTES,
                 "the two answers above, divided", unit="FLOP/B"),
        Question("gemm_compute_bound", "is it compute-bound on an H200 (1) or memory-bound (0)?",
                 1 if GEMM_FLOPS / GEMM_BYTES > BF16 / BW else 0,
                 "compare its FLOP/B with the ridge point 989e12 / 4.8e12 FLOP/B", rtol=0),
        Question("softmax_bytes", "fp32 softmax over 8192 x 8192, read once and written once: bytes",
                 SOFTMAX_BYTES, "input and output, 4 bytes per fp32 element", rtol=1e-9, unit="B"),
    ])


# a copy is exact: NaN, infinities, a subnormal, -0 and the largest float all come through unchanged
SPECIALS = (float("nan"), float("inf"), float("-inf"), 1e-40, -0.0, 3.4e38, -3.4e38)


def _inputs(case, gen):
    return {"x": (plant(gen.normal(case.shape, "f32"), "f32", SPECIALS), "f32")}


def _hidden(rng):
    """Fixed edge cases (a prime, one past a block of 256, > 2^31 elements: 64-bit indexing), and a
    prime and a size near 2^24 drawn for this batch."""
    return [7, 257, 65521, 2 ** 31 + 5, primes_between(rng, 10_000, 2_000_000),
            (1 << 24) + rng.randrange(1, 4096)]


def _reference(xp, ins, case):
    return ins["x"]


def _launch(k, ins, out, case, ctx):
    import cupy as cp
    k((ctx.sms * 8,), (256,), (ins["x"], out, cp.int64(case.shape)))


copy_probe = KernelTask(
    id="01.copy_probe",
    title="A grid-stride copy probe",
    kernel="copy_probe",
    signature='extern "C" __global__ void copy_probe(const float* x, float* y, long long n)',
    source_var="copy_probe_src",
    shapes=[0, 1, 3, 1000, 1_000_003],
    inputs=_inputs, reference=_reference, launch=_launch,
    out_shape=lambda n: (n,), out_dtype="float32",
    bytes_moved=lambda n: 8 * n,
    launch_text="grid = 8 blocks per SM (132 x 8 = 1056 on an H200), 256 threads per block, whatever n is "
                "(n = 0 included)",
    speed_shape=2 ** 27, speed_threshold=85.0,
    points_correct=3, points_hidden=1, points_speed=2,
    rtol=0.0, atol=0.0,
    hidden_shapes=_hidden,
    ref_temps=1,
)

TASKS = (numbers, copy_probe)
