"""Chapter 02: bf16 `y = x + b`, one element per thread, against torch.add and the copy ceiling.

Kernels (kernels/02-first-kernel/):
- 01_add_bf16.cu      `add_bf16`      one element per thread, 64-bit index, bounds check (kernel "naive");
- 02_add_bf16_ept.cu  `add_bf16_ept`  `ept` elements per thread, G = grid threads apart (the lab's sweep).

bf16 arrays are CuPy uint16 arrays of bit patterns (labkit.bf16). Lab tools: `launch_sweep` (block size x
elements per thread) and `l2_trap` (the same kernel timed with and without an L2 flush).
Records: op add_bf16 (the naive kernel at 2^28, against torch.add) and op add_bf16_launch (the launch sweep
at 2^26, one record per configuration, named by `launch_kernel_name`; full runs only), from which the book
reads its figures.
"""
from __future__ import annotations

import math

import numpy as np

from ..measure import bf16
from ..errors import CheckFailed
from ..measure.checks import GuardedOutput, expect, expect_threads
from ..measure.compile import kernel
from ..errors import KernelInputError
from ..measure.timing import bench

HEADLINE = {"add_bf16": "268435456", "add_bf16_launch": "67108864"}   # the shape of each op's plain figures

ADD_NAIVE = "02-first-kernel/01_add_bf16.cu"
ADD_EPT = "02-first-kernel/02_add_bf16_ept.cu"
EPT_MAX = 8                                              # the largest ept the lab offers (one compile each)
CHECK_SIZES = [0, 1, 2, 31, 257, 65537, 1_000_003]       # empty, one, tails of a block, primes
HUGE_N = 2**31 + 17                                      # past 2^31: 32-bit indexing breaks (4 GiB a tensor)
SWEEP_THREADS = (32, 64, 128, 256, 512, 1024)
SWEEP_EPT = (1, 2, 4, 8)
L2_TRAP_SIZES = tuple((4 << 20) << k for k in range(9))  # working sets of 4 MiB ... 1 GiB

# bf16 bit patterns used by the checks
BF16_NAN, BF16_INF, BF16_NEG_INF, BF16_NEG_ZERO, BF16_MAX = 0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x7F7F
SENTINEL, SENTINEL_VALUE = 0x4040, 3.0                   # marks output elements a kernel must not touch


# ------------------------------------------------------------------------------------------ wrappers

def _expect_add(x, b, y, align: int = 2):
    expect("x", x, dtype=np.uint16, align=align)
    expect("b", b, dtype=np.uint16, shape=x.shape, align=align)
    expect("y", y, dtype=np.uint16, shape=x.shape, align=align)


def add_naive(x, b, y, threads: int = 256):
    """y = x + b (bf16 bit patterns as uint16, any shape, contiguous), one element per thread."""
    _expect_add(x, b, y)
    expect_threads(threads)
    n = x.size
    if n:
        blocks = (n + threads - 1) // threads
        kernel(ADD_NAIVE, "add_bf16")((blocks,), (int(threads),), (x, b, y, np.int64(n)))


def add_elements_per_thread(x, b, y, threads: int = 256, ept: int = 1):
    """y = x + b with `ept` elements per thread (1..8), each a grid's width apart (coalesced)."""
    _expect_add(x, b, y)
    expect_threads(threads)
    if not isinstance(ept, (int, np.integer)) or not 1 <= ept <= EPT_MAX:
        raise KernelInputError(f"ept must be an integer from 1 to {EPT_MAX}, got {ept!r}")
    n = x.size
    if n:
        blocks = (n + threads * ept - 1) // (threads * ept)   # grid threads x ept >= n
        kernel(ADD_EPT, "add_bf16_ept", (f"-DEPT={int(ept)}",))((blocks,), (int(threads),), (x, b, y, np.int64(n)))


# ------------------------------------------------------------------------------------------ helpers

def random_bf16(shape, *, scale: float = 1.0, low: float | None = None, high: float | None = None):
    """Fresh random bf16 bit patterns on the GPU: normal(0, scale), or uniform(low, high) if given."""
    import cupy as cp
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),)
    size = int(np.prod(shape, dtype=np.int64))
    if low is not None:
        f = cp.random.uniform(low, high, size, dtype=cp.float32)
    else:
        f = cp.random.standard_normal(size, dtype=cp.float32)
        if scale != 1.0:
            f *= cp.float32(scale)
    return bf16.to_bits(f).reshape(shape)


def add_reference(xh, bh):
    """Host reference of the bf16 add: decode, add in fp32, round to bf16 (returned as float32 values).

    The fp32 sum of two bf16 values rounded once more to bf16 equals the correctly rounded (float64) sum:
    fp32 keeps 24 significand bits >= 2 x 8 + 2, so the double rounding is innocuous. Kernels must match
    it bit for bit (rtol = atol = 0); NaN must meet NaN.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        s = bf16.from_bits(np.asarray(xh)) + bf16.from_bits(np.asarray(bh))
    return bf16.round_trip(s)


def gpu_add_reference(x, b):
    """The same reference computed on the GPU (bit patterns), for sizes too large for the host."""
    return bf16.to_bits(bf16.from_bits(x) + bf16.from_bits(b))


def _plant_specials(x, b):
    """NaN, infinities, signed zero and an overflowing sum at fixed places (arrays of more than 8 elements)."""
    if x.size > 8:
        x[2] = BF16_NAN                      # NaN + b -> NaN
        x[3] = BF16_INF                      # inf + b -> inf
        b[4] = BF16_NEG_INF                  # x + -inf -> -inf
        x[5], b[5] = BF16_NEG_ZERO, 0        # -0 + 0 -> +0
        x[6] = b[6] = BF16_MAX               # max + max overflows fp32 -> inf


def verify_add(ctx, what: str, fn, n: int, *, x_off: int = 0, b_off: int = 0, y_off: int = 0, specials=True):
    """Check `fn(x, b, y)` on fresh random inputs of n elements, bit-exact, with a guarded output.

    `x_off`, `b_off`, `y_off` (elements) hand the kernel views that start that far into a larger buffer,
    e.g. 1 for the misaligned view x[1:]; the output elements before y are set to a sentinel that must stay.
    Returns what `fn` returned (vector wrappers return the path they took).
    """
    x = random_bf16(n + x_off)[x_off:]
    b = random_bf16(n + b_off)[b_off:]
    if specials:
        _plant_specials(x, b)
    out = GuardedOutput((n + y_off,), "bfloat16")
    if y_off:
        out.array[:y_off] = SENTINEL
    result = fn(x, b, out.array[y_off:])
    ref = np.concatenate([np.full(y_off, SENTINEL_VALUE, np.float32),
                          add_reference(x.get(), b.get())])
    ctx.verify(what, out, ref, "bfloat16", rtol=0, atol=0)
    return result


def verify_add_huge(ctx, kernels, n: int = HUGE_N, chunk: int = 1 << 28):
    """Check each (name, fn) of `kernels` at a size past 2^31 on the GPU: the reference is computed in
    chunks with CuPy (decode, fp32 add, round) and compared bit for bit there; the guarded output also
    catches elements never written and writes out of bounds. Needs about 20 GiB of GPU memory."""
    import cupy as cp
    x = cp.empty(n, dtype=cp.uint16)
    b = cp.empty(n, dtype=cp.uint16)
    try:
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            x[s:e] = random_bf16(e - s)
            b[s:e] = random_bf16(e - s)
        for name, fn in kernels:
            out = GuardedOutput((n,), "bfloat16")
            try:
                fn(x, b, out.array)
                problems = out.problems()
                if not problems:
                    bad, first = 0, None
                    for s in range(0, n, chunk):
                        e = min(n, s + chunk)
                        ne = gpu_add_reference(x[s:e], b[s:e]) != out.array[s:e]
                        k = int(cp.count_nonzero(ne))
                        if k and first is None:
                            i = s + int(cp.flatnonzero(ne)[0])
                            exp_v = float(bf16.from_bits(gpu_add_reference(x[i:i + 1], b[i:i + 1]))[0])
                            got_v = float(bf16.from_bits(out.array[i:i + 1])[0])
                            first = f"[{i}]: expected {exp_v:.6g}, got {got_v:.6g}"
                        bad += k
                    if bad:
                        problems.append(f"{bad} of {n} elements wrong; first at {first}")
                if problems:
                    raise CheckFailed(f"{name} n={n}: " + "; ".join(problems))
                ctx.log.append(f"ok  {name} n={n}")
            finally:
                del out
    finally:
        del x, b
        cp.get_default_memory_pool().free_all_blocks()


def torch_bf16(a):
    """A zero-copy torch bf16 view of a CuPy uint16 array (DLPack), for the torch baselines."""
    import torch
    try:
        t = torch.from_dlpack(a)
    except Exception:            # a torch without uint16 in DLPack: go through int16 (same bits)
        t = torch.from_dlpack(a.view(np.int16))
    return t.view(torch.bfloat16)


# ------------------------------------------------------------------------------------------ lab tools

def checked_sweep(configs, launch, y, ref, what, desc: str, progress: bool = True) -> list:
    """For each configuration: poison `y`, run `launch(*config)` once and compare `y` bit for bit with
    `ref` (CheckFailed naming `what(*config)` on a mismatch), then time it with the L2 flushed before
    every run. Returns [(config, Timing)]. The sweeps of chapters 02 and 03 share it."""
    import cupy as cp
    from ..measure.progress import tqdm
    timed = []
    for config in tqdm(list(configs), desc=desc, disable=not progress):
        y.fill(np.uint16(0x7FA1))
        launch(*config)
        if y.size and bool((y != ref).any()):
            raise CheckFailed(f"{what(*config)}: {int(cp.count_nonzero(y != ref))} elements wrong")
        timed.append((config, bench(lambda: launch(*config))))
    return timed


def launch_kernel_name(threads: int, ept: int) -> str:
    """The record name of one launch configuration of the sweep: t0256_ept1 (threads, elements per thread)."""
    return f"t{threads:04d}_ept{ept}"


def launch_of(kernel_name: str) -> tuple[int, int]:
    """(threads, ept) of a sweep record's name: the inverse of launch_kernel_name."""
    t, e = kernel_name.split("_ept")
    return int(t[1:]), int(e)


def blocks_per_sm(record, sms: int) -> float:
    """The blocks each SM runs in turn in a sweep record's launch: its n over threads x ept, over the SMs."""
    threads, ept = launch_of(record.kernel)
    return record.shape[0] / (threads * ept) / sms


def block_cost_ns(records, sms: int, threads=(32, 64, 128)) -> dict[int, float]:
    """{threads: ns per block per SM} of the sweep's `ept` = 1 records (op add_bf16_launch) at small block
    sizes, where a block moves so few bytes that its start and retirement set the time: the median time over
    the number of blocks each SM runs."""
    out = {}
    for r in (r for r in records if r.op == "add_bf16_launch"):
        t, ept = launch_of(r.kernel)
        if ept == 1 and t in threads:
            out[t] = r.median_ms * 1e6 / blocks_per_sm(r, sms)
    return dict(sorted(out.items()))


def launch_sweep(n: int = 1 << 28, threads=SWEEP_THREADS, epts=SWEEP_EPT, progress: bool = True) -> list[dict]:
    """Time `add_elements_per_thread` over block sizes x elements per thread on n elements.

    Each configuration is first checked bit for bit against a GPU reference, then timed with the L2
    flushed before every run. Returns one dict per configuration: threads, ept, blocks, median_ms,
    spread_ms, gbps (6n bytes over the median), timing (the Timing itself).
    """
    import cupy as cp
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    x, b = random_bf16(n), random_bf16(n)
    y = cp.empty(n, dtype=cp.uint16)
    timed = checked_sweep([(t, e) for t in threads for e in epts],
                          lambda t, e: add_elements_per_thread(x, b, y, t, e), y, gpu_add_reference(x, b),
                          lambda t, e: f"add_bf16_ept threads={t} ept={e} n={n}",
                          "block size x elements per thread", progress)
    return [{"threads": t, "ept": e, "blocks": -(-n // (t * e)), "median_ms": tm.median_ms,
             "spread_ms": tm.spread_ms, "gbps": 6 * n / (tm.median_ms * 1e-3) / 1e9, "timing": tm}
            for (t, e), tm in timed]


def l2_trap(sizes_bytes=L2_TRAP_SIZES, threads: int = 256, progress: bool = True) -> list[dict]:
    """The naive add timed on working sets (x + b + y = 6n bytes) of `sizes_bytes`, two ways:

    - repeated (`flush_l2=False`): back-to-back runs over one buffer, so a working set that fits in L2 is
      served from it. The runs are captured in a CUDA graph of k launches and the graph replays are timed
      (time / k), so that the Python launch cost (several microseconds a call) does not hide the kernel;
    - flushed (`flush_l2=True`): every run starts with a cold L2 (the flush also keeps the GPU busy while
      the launch is queued).

    Returns one dict per size: working_set_bytes, n, gbps_repeated, gbps_flushed, ms_repeated, ms_flushed,
    launches_per_graph. Bandwidth counts 6n bytes per run.
    """
    import cupy as cp
    from ..measure.progress import tqdm
    rows = []
    stream = cp.cuda.Stream(non_blocking=True)
    for size in tqdm(list(sizes_bytes), desc="L2 trap: working sets", disable=not progress):
        n = int(size) // 6
        x, b = random_bf16(n), random_bf16(n)
        y = cp.empty(n, dtype=cp.uint16)
        add_naive(x, b, y, threads)                       # loads the module; checked below
        if bool((y != gpu_add_reference(x, b)).any()):
            raise CheckFailed(f"add_bf16 n={n}: wrong result")
        flushed = bench(lambda: add_naive(x, b, y, threads), flush_l2=True)
        k = int(min(256, max(1, math.ceil(0.2 / max(0.002, 6 * n / 3e12 * 1e3)))))  # ~0.2 ms per replay
        with stream:
            stream.begin_capture()
            for _ in range(k):
                add_naive(x, b, y, threads)
            graph = stream.end_capture()
            repeated = bench(lambda: graph.launch(stream), flush_l2=False)
        stream.synchronize()
        ms_rep = repeated.median_ms / k
        rows.append({"working_set_bytes": 6 * n, "n": n,
                     "gbps_repeated": 6 * n / (ms_rep * 1e-3) / 1e9,
                     "gbps_flushed": 6 * n / (flushed.median_ms * 1e-3) / 1e9,
                     "ms_repeated": ms_rep, "ms_flushed": flushed.median_ms, "launches_per_graph": k})
        del graph, x, b, y
    return rows


# ------------------------------------------------------------------------------------------ benchmarks

def check_kernels(ctx):
    for n in CHECK_SIZES:
        verify_add(ctx, f"add_bf16 (naive) n={n}", add_naive, n)
    verify_add(ctx, "add_bf16 (naive) threads=1024 n=65537", lambda x, b, y: add_naive(x, b, y, 1024), 65537)
    verify_add(ctx, "add_bf16 (naive) threads=32 n=257", lambda x, b, y: add_naive(x, b, y, 32), 257)
    for threads, ept in ((256, 1), (256, 2), (128, 3), (32, 4), (1024, 8), (64, 8)):
        for n in CHECK_SIZES:
            verify_add(ctx, f"add_bf16_ept threads={threads} ept={ept} n={n}",
                       lambda x, b, y: add_elements_per_thread(x, b, y, threads, ept), n)
    if not ctx.quick:
        verify_add_huge(ctx, [("add_bf16 (naive)", add_naive)])


def benchmarks(ctx):
    import cupy as cp
    check_kernels(ctx)
    n = 2**26 if ctx.quick else 2**28
    x, b = random_bf16(n), random_bf16(n)
    y = cp.empty(n, dtype=cp.uint16)
    t = bench(lambda: add_naive(x, b, y))
    base, base_name = None, None
    try:
        import torch
        xt, bt, yt = torch_bf16(x), torch_bf16(b), torch_bf16(y)
        base = bench(lambda: torch.add(xt, bt, out=yt))
        base_name = "torch.add"
    except ImportError:
        ctx.log.append("torch not installed: add_bf16 recorded without a baseline")
    yield ctx.record(chapter="02", op="add_bf16", kernel="naive", shape=[n], dtype="bfloat16", bytes=6 * n,
                     flops=n, timing=t, baseline=base_name, baseline_timing=base, ceiling="copy")
    if ctx.quick:                  # the lab runs the sweep itself (its section 5) and wants one record here
        return
    # the launch-configuration sweep the book reads its figures from
    m = 2**26
    for r in launch_sweep(n=m, progress=False):
        yield ctx.record(chapter="02", op="add_bf16_launch", kernel=launch_kernel_name(r["threads"], r["ept"]),
                         shape=[m], dtype="bfloat16", bytes=6 * m, flops=m, timing=r["timing"], ceiling="copy",
                         note=f"{r['blocks']} blocks")
