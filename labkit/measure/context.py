"""What a chapter's checks and benchmarks need: this run's ceilings, GPU facts, a log of passed checks, and
a record maker that measures each memory-bound kernel's own-size copy in the same run."""
from __future__ import annotations

import json
import os

from ..errors import CheckFailed
from .checks import compare
from .device import now_iso
from .records import CEILINGS, Record
from .timing import time_copy


class Context:
    """Ceilings and GPU facts of this run; `quick` asks for smaller shapes and fewer repetitions
    (notebooks, smoke runs)."""

    def __init__(self, ceilings: dict, gpu: dict, quick: bool = False):
        self.ceilings = ceilings
        self.gpu = gpu
        self.quick = quick
        self.log: list[str] = []
        self._copies: dict[int, object] = {}

    @property
    def sms(self) -> int:
        return self.gpu["sm_count"]

    def verify(self, what: str, out, ref, dtype: str, **tol) -> None:
        """Raise CheckFailed unless the GuardedOutput `out` was fully written, in bounds, and matches `ref`
        (a NumPy or CuPy array); log the pass."""
        problems = out.problems()
        if not problems:
            m = compare(out.values(), ref, dtype=dtype, shape=out.shape, **tol)
            if m is not None:
                problems.append(str(m))
        if problems:
            raise CheckFailed(f"{what}: " + "; ".join(problems))
        self.log.append(f"ok  {what}")

    def copy_timing(self, nbytes: int):
        """Timing of `cupy.copyto` moving `nbytes` (half read, half written), measured once per size in
        this run: the ceiling of a memory-bound kernel that moves the same bytes."""
        if nbytes not in self._copies:
            self._copies[nbytes] = time_copy(nbytes)
        return self._copies[nbytes]

    def record(self, *, chapter: str, op: str, kernel: str, shape, dtype: str, bytes: int, flops: int,
               timing, baseline: str | None = None, baseline_timing=None, ceiling: str = "copy",
               note: str = "") -> Record:
        if timing.profile_id is not None:
            _log_profiled(timing.profile_id, op, kernel, shape)
        if ceiling == "copy":
            copy_ms = self.copy_timing(int(bytes)).median_ms
            value = bytes / (copy_ms * 1e-3) / 1e9
        else:
            copy_ms = None
            value = self.ceilings.get(CEILINGS[ceiling][1]) or 0.0
        return Record(chapter=chapter, op=op, kernel=kernel, shape=list(shape), dtype=dtype, bytes=int(bytes),
                      flops=int(flops), median_ms=timing.median_ms, spread_ms=timing.spread_ms,
                      baseline=baseline, baseline_median_ms=baseline_timing.median_ms if baseline_timing else None,
                      ceiling_name=ceiling, ceiling_value=value, copy_ms=copy_ms, recorded_at=now_iso(), note=note)


def _log_profiled(profile_id: int, op: str, kernel: str, shape) -> None:
    """Under the profiler (runner.profile): note which record the profiled call `profile_id` made."""
    log = os.environ.get("LABKIT_PROFILE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"id": profile_id, "op": op, "kernel": kernel,
                                "shape": "x".join(str(s) for s in shape)}) + "\n")
