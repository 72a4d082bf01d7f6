"""Timing a kernel honestly: CUDA events, warm-up, the L2 flushed by a read before every run, median and spread.

The arithmetic (`summarize`) is separate from the GPU loop (`bench`) so it is tested without a GPU.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
from typing import Callable, Sequence

from .device import sm_count


@dataclasses.dataclass(frozen=True)
class Timing:
    median_ms: float
    spread_ms: float          # interquartile range: robust to the odd slow run
    min_ms: float
    max_ms: float
    reps: int
    profile_id: int | None = None   # under the profiler: which timed call this was (see `bench`)
    samples: tuple = dataclasses.field(default=(), repr=False, compare=False)   # the runs, in ms

    def __str__(self):
        return f"{self.median_ms:.4f} ms (IQR {self.spread_ms:.4f}, n={self.reps})"


def summarize(samples_ms: Sequence[float]) -> Timing:
    if not samples_ms:
        raise ValueError("no timing samples")
    s = sorted(samples_ms)
    if len(s) >= 4:
        q = statistics.quantiles(s, n=4, method="inclusive")
        spread = q[2] - q[0]
    else:
        spread = s[-1] - s[0]
    return Timing(statistics.median(s), spread, s[0], s[-1], len(s), samples=tuple(samples_ms))


def pooled(timings) -> Timing:
    """One Timing over the runs of several (the same function timed beside several others); under the
    profiler, where a Timing holds no runs, the first of them."""
    runs = [x for t in timings for x in t.samples]
    return summarize(runs) if runs else timings[0]


_FLUSH_SOURCE = r"""
extern "C" __global__ void l2_flush_read(const uint4* __restrict__ p, long long n, unsigned int* sink)
{
    unsigned int acc = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const uint4 v = __ldcg(p + i);          // through L2, not kept in L1
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) {                   // practically never: keeps the loads from being removed
        sink[0] = acc;
    }
}
"""


class L2Flusher:
    """Evicts the L2 before a timed run by READING a buffer twice the L2's size.

    A flush that writes (a memset) leaves the L2 full of dirty lines, and the timed kernel pays for writing
    them back as it evicts them: on an H200 a 64 MiB `cupy.copyto` took 36.4 us after a memset flush and
    33.2 us after a read flush. Reading leaves only clean lines, and the write-back of the previous run's
    output happens here, outside the timed region.
    """

    def __init__(self):
        import cupy as cp
        l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"]
        self.nbytes = max(2 * l2, 1 << 20) // 16 * 16
        self.buf = cp.ones(self.nbytes // 4, dtype=cp.uint32)
        self.sink = cp.zeros(1, dtype=cp.uint32)
        self.kernel = cp.RawKernel(_FLUSH_SOURCE, "l2_flush_read")
        self.grid = (sm_count() * 8,)
        self.args = (self.buf, cp.int64(self.nbytes // 16), self.sink)
        self()                                    # compile, and write back the buffer's own fill

    def __call__(self):
        self.kernel(self.grid, (256,), self.args)


_flusher = None


def _l2_flusher() -> L2Flusher:
    """The process's one L2 flusher (its buffer is twice the L2), made on first use."""
    global _flusher
    if _flusher is None:
        _flusher = L2Flusher()
    return _flusher


def _warm_up(call: Callable, stream, warmup_ms: float) -> tuple[int, float]:
    """Runs `call(i)` for i = 0, 1, ... until at least 3 runs and `warmup_ms` of kernel time (module load,
    JIT, clocks ramping up); returns (runs made, ms per run), the latter a first estimate of one run."""
    import cupy as cp
    start, end = cp.cuda.Event(), cp.cuda.Event()
    i, spent = 0, 0.0
    while True:
        start.record(stream)
        call(i)
        end.record(stream)
        end.synchronize()
        spent += cp.cuda.get_elapsed_time(start, end)
        i += 1
        if i >= 3 and spent >= warmup_ms or i >= 1000:
            return i, max(spent / i, 1e-4)


def bench(fn: Callable, *, inputs: Sequence[tuple] | None = None, warmup_ms: float = 25.0,
          reps: int | None = None, max_reps: int = 200, target_ms: float = 300.0,
          flush_l2: bool = True) -> Timing:
    """Median time of `fn()` (or `fn(*inputs[i % len(inputs)])`, rotating input sets) in milliseconds.

    Each run is bracketed by its own pair of CUDA events on the current stream; the L2 is flushed before
    each run unless `flush_l2=False` (then rotate `inputs` whose total size is several times the L2).
    The repetition count fits `target_ms` of kernel time, between 10 and `max_reps`, unless given.
    """
    import cupy as cp
    if os.environ.get("LABKIT_PROFILE"):   # under a profiler: run once, the profiler does the timing
        return _profiled_once(fn if inputs is None else (lambda: fn(*inputs[0])))
    flush = _l2_flusher() if flush_l2 else None
    call = (lambda i: fn()) if inputs is None else (lambda i: fn(*inputs[i % len(inputs)]))
    stream = cp.cuda.get_current_stream()

    i, one = _warm_up(call, stream, warmup_ms)
    if reps is None:
        reps = int(min(max_reps, max(10, target_ms / one)))

    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for k, (s, e) in enumerate(events):
        if flush:
            flush()
        s.record(stream)
        call(i + k)
        e.record(stream)
    events[-1][1].synchronize()
    return summarize([cp.cuda.get_elapsed_time(s, e) for s, e in events])


def bench_interleaved(fns: dict, *, warmup_ms: float = 25.0, reps: int | None = None, max_reps: int = 50,
                      target_ms: float = 300.0, flush_l2: bool = True) -> dict:
    """Median times of several functions measured in alternation: repetition k of each runs right after
    repetition k of the one before it, each after its own L2 flush and inside its own pair of events.

    Under sustained tensor-core load an H200's clock falls within tens of milliseconds, and cuBLAS at
    8192^3 was seen between 1.46 and 1.69 ms in one run: a kernel timed for 50 repetitions after a baseline
    timed for 20 is measured at a lower clock than its baseline. Alternating gives every function the same
    drift, so their ratio is fair. Returns {name: Timing} in the order of `fns`; the repetition count fits
    `target_ms` of the functions' summed time, between 10 and `max_reps`, unless given."""
    import cupy as cp
    if os.environ.get("LABKIT_PROFILE"):
        return {name: _profiled_once(fn) for name, fn in fns.items()}
    flush = _l2_flusher() if flush_l2 else None
    stream = cp.cuda.get_current_stream()
    one = sum(_warm_up(lambda i, fn=fn: fn(), stream, warmup_ms)[1] for fn in fns.values())   # one round
    if reps is None:
        reps = int(min(max_reps, max(10, target_ms / one)))
    events = {name: [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)] for name in fns}
    for k in range(reps):
        for name, fn in fns.items():
            if flush:
                flush()
            s, e = events[name][k]
            s.record(stream)
            fn()
            e.record(stream)
    stream.synchronize()
    return {name: summarize([cp.cuda.get_elapsed_time(s, e) for s, e in ev]) for name, ev in events.items()}


PROFILE_MARKER = "labkit_profile_marker"
_profiled = 0


def _profiled_once(fn) -> Timing:
    """Under Nsight Compute (runner.profile): run `fn` once inside the NVTX range the profiler is limited
    to, after a marker kernel that tells the profile which timed call the next kernels belong to (the
    k-th marker in the profile opens call k). The Timing carries k, so a record made from it names the
    profiled kernels' op and shape."""
    import cupy as cp
    global _profiled
    _profiled += 1
    stream = cp.cuda.get_current_stream()
    stream.synchronize()
    cp.cuda.nvtx.RangePush("labkit-timed")    # ncu profiles only kernels inside this range
    cp.RawKernel(f'extern "C" __global__ void {PROFILE_MARKER}(int k) {{}}', PROFILE_MARKER)((1,), (1,),
                                                                                        (cp.int32(_profiled),))
    fn()
    stream.synchronize()
    cp.cuda.nvtx.RangePop()
    return Timing(1.0, 0.0, 1.0, 1.0, 1, profile_id=_profiled)


def time_copy(nbytes: int, **kw) -> Timing:
    """Timing of `cupy.copyto` moving `nbytes` bytes in all (half read, half written; rounded to 8 bytes):
    the ceiling of a memory-bound kernel of that size. Copy bandwidth grows with size (on an H200 from
    3.6 TB/s at 134 MB to 4.2 TB/s at 1.6 GB), so a kernel is compared with a copy of its own bytes."""
    import cupy as cp
    half = max(4, nbytes // 8 * 4)
    src = cp.random.random(half // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    try:
        return bench(lambda: cp.copyto(dst, src), **kw)
    finally:
        del src, dst
