"""Timing a kernel honestly: CUDA events, warm-up, L2 flushed before every run, median and spread.

The arithmetic (`summarize`) is separate from the GPU loop (`bench`) so it is tested without a GPU.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
from typing import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Timing:
    median_ms: float
    spread_ms: float          # interquartile range: robust to the odd slow run
    min_ms: float
    max_ms: float
    reps: int

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
    return Timing(statistics.median(s), spread, s[0], s[-1], len(s))


class L2Flusher:
    """Writes a buffer twice the L2 size, so the next kernel starts with a cold cache."""

    def __init__(self):
        import cupy as cp
        l2 = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"]
        self.buf = cp.empty(max(2 * l2, 1 << 20), dtype=cp.uint8)

    def __call__(self):
        self.buf.fill(0)  # cudaMemsetAsync on the current stream


_flusher = None


def bench(fn: Callable, *, inputs: Sequence[tuple] | None = None, warmup_ms: float = 25.0,
          reps: int | None = None, max_reps: int = 200, target_ms: float = 300.0,
          flush_l2: bool = True) -> Timing:
    """Median time of `fn()` (or `fn(*inputs[i % len(inputs)])`, rotating input sets) in milliseconds.

    Each run is bracketed by its own pair of CUDA events on the current stream; the L2 is flushed before
    each run unless `flush_l2=False` (then rotate `inputs` whose total size is several times the L2).
    The repetition count fits `target_ms` of kernel time, between 10 and `max_reps`, unless given.
    """
    import cupy as cp
    global _flusher
    if os.environ.get("LABKIT_PROFILE"):   # under a profiler: run once, the profiler does the timing
        cp.cuda.get_current_stream().synchronize()
        cp.cuda.nvtx.RangePush("labkit-timed")    # ncu profiles only kernels inside this range
        (fn() if inputs is None else fn(*inputs[0]))
        cp.cuda.get_current_stream().synchronize()
        cp.cuda.nvtx.RangePop()
        return Timing(1.0, 0.0, 1.0, 1.0, 1)
    if flush_l2 and _flusher is None:
        _flusher = L2Flusher()
    call = (lambda i: fn()) if inputs is None else (lambda i: fn(*inputs[i % len(inputs)]))
    stream = cp.cuda.get_current_stream()

    # warm-up: module load, JIT, clocks ramping up; also gives a first estimate of one run's time
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
            break
    one = max(spent / i, 1e-4)
    if reps is None:
        reps = int(min(max_reps, max(10, target_ms / one)))

    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
    for k, (s, e) in enumerate(events):
        if flush_l2:
            _flusher()
        s.record(stream)
        call(i + k)
        e.record(stream)
    events[-1][1].synchronize()
    return summarize([cp.cuda.get_elapsed_time(s, e) for s, e in events])
