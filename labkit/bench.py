"""Each chapter's kernels against their baselines, with the ceilings measured in the same run.

A chapter module (labkit/chapters/chNN.py) defines `benchmarks(ctx)`, a generator of Records: for each
kernel it first checks correctness on irregular shapes (raising CheckFailed), then times it and its
baseline with `labkit.timing.bench`, and hands the figures to `ctx.record`.
"""
from __future__ import annotations

import importlib
import sys
from typing import Iterable

from .records import Record

CHAPTERS = {"01": "labkit.chapters.ch01", "02": "labkit.chapters.ch02", "03": "labkit.chapters.ch03",
            "04": "labkit.chapters.ch04"}


class CheckFailed(AssertionError):
    pass


class Context:
    """What a chapter's benchmarks need: this run's ceilings, GPU facts, and a record maker."""

    def __init__(self, ceilings: dict, gpu: dict, quick: bool = False):
        self.ceilings = ceilings
        self.gpu = gpu
        self.quick = quick   # smaller shapes and fewer repetitions (notebooks, smoke tests)
        self.log: list[str] = []

    @property
    def sms(self) -> int:
        return self.gpu["sm_count"]

    def verify(self, what: str, out, ref, dtype: str, **tol):
        """Raise CheckFailed unless the GuardedOutput `out` was fully written, in bounds, and matches `ref`."""
        from .checks import compare_nd
        problems = out.problems()
        if not problems:
            m = compare_nd(out.values(), ref, out.shape, dtype=dtype, **tol)
            if m is not None:
                problems.append(str(m))
        if problems:
            raise CheckFailed(f"{what}: " + "; ".join(problems))
        self.log.append(f"ok  {what}")

    def record(self, *, chapter: str, op: str, kernel: str, shape, dtype: str, bytes: int, flops: int,
               timing, baseline: str | None = None, baseline_timing=None, ceiling: str = "copy",
               note: str = "") -> Record:
        from .device import now_iso
        value = {"copy": self.ceilings["copy_gbps"], "fp32": self.ceilings["fp32_tflops"],
                 "bf16": self.ceilings["bf16_tflops"], "fp32_peak": self.ceilings.get("fp32_peak_tflops") or 0}[ceiling]
        return Record(chapter=chapter, op=op, kernel=kernel, shape=list(shape), dtype=dtype, bytes=int(bytes),
                      flops=int(flops), median_ms=timing.median_ms, spread_ms=timing.spread_ms,
                      baseline=baseline, baseline_median_ms=baseline_timing.median_ms if baseline_timing else None,
                      ceiling_name=ceiling, ceiling_value=value, recorded_at=now_iso(), note=note)


def run(chapters: Iterable[str] | None = None, quick: bool = False, ceilings: dict | None = None,
        progress: bool = True) -> tuple[dict, dict, list[Record]]:
    """Measure ceilings (unless given) and run the chapters' benchmarks; returns (gpu, ceilings, records)."""
    from tqdm.auto import tqdm
    from . import ceilings as ceil
    from .device import gpu_info
    gpu = gpu_info()
    if ceilings is None:
        ceilings = ceil.measure(refresh=True, verbose=progress)
    ctx = Context(ceilings, gpu, quick)
    chapters = sorted(chapters or CHAPTERS)
    records: list[Record] = []
    for ch in tqdm(chapters, desc="chapters", disable=not progress, file=sys.stdout):
        mod = importlib.import_module(CHAPTERS[ch])
        records.extend(mod.benchmarks(ctx))
    return gpu, ceilings, records


def summary(records: list[Record]) -> str:
    rows = [f"{'ch':3s} {'op':15s} {'kernel':20s} {'shape':>14s} {'ms':>9s} {'GB/s':>7s} {'TFLOP/s':>8s} "
            f"{'%ceil':>6s} {'x base':>7s}"]
    for r in records:
        sp = f"{r.speedup:7.2f}" if r.speedup is not None else "      -"
        rows.append(f"{r.chapter:3s} {r.op:15s} {r.kernel:20s} {r.shape_key:>14s} {r.median_ms:9.4f} {r.gbps:7.0f} "
                    f"{r.tflops:8.3f} {100 * r.fraction_of_ceiling:5.1f}% {sp}")
    return "\n".join(rows)
