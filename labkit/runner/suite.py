"""The benchmark suite: each chapter's benchmarks with the ceilings measured in the same run.

Chapters are found in labkit.chapters (one module per chapter); each module's `benchmarks(ctx)` yields
Records (see labkit/chapters/__init__.py).
"""
from __future__ import annotations

import sys
from typing import Iterable

from .. import chapters as chapter_modules
from ..measure import ceilings as ceil
from ..measure.context import Context
from ..measure.device import gpu_info
from ..measure.progress import tqdm
from ..measure.records import Record


def run(chapters: Iterable[str] | None = None, quick: bool = False, ceilings: dict | None = None,
        progress: bool = True) -> tuple[dict, dict, list[Record]]:
    """Measure ceilings (unless given) and run the chapters' benchmarks; returns (gpu, ceilings, records)."""
    gpu = gpu_info()
    if ceilings is None:
        ceilings = ceil.measure(refresh=True, verbose=progress)
    ctx = Context(ceilings, gpu, quick)
    records: list[Record] = []
    for ch in tqdm(sorted(chapters or chapter_modules.numbers()), desc="chapters", disable=not progress,
                   file=sys.stdout):
        records.extend(chapter_modules.module(ch).benchmarks(ctx))
    return gpu, ceilings, records


def summary(records: list[Record]) -> str:
    rows = [f"{'ch':3s} {'op':15s} {'kernel':20s} {'shape':>14s} {'ms':>9s} {'GB/s':>7s} {'TFLOP/s':>8s} "
            f"{'%ceil':>6s} {'x base':>7s}"]
    for r in records:
        sp = f"{r.speedup:7.2f}" if r.speedup is not None else "      -"
        rows.append(f"{r.chapter:3s} {r.op:15s} {r.kernel:20s} {r.shape_key:>14s} {r.median_ms:9.4f} {r.gbps:7.0f} "
                    f"{r.tflops:8.3f} {100 * r.fraction_of_ceiling:5.1f}% {sp}")
    return "\n".join(rows)
