"""Measurement records: one kernel at one shape, and everything derived from it in one place.

A record says what a kernel computes (`op`), which version it is (`kernel`), the bytes and FLOPs the work
must move and do, its median time and spread, the library baseline timed in the same run, and the ceiling
it is judged against, measured in the same run:

- a memory-bound kernel (`ceiling_name="copy"`) against a `cupy.copyto` of the same byte count
  (`copy_ms`): copy bandwidth grows with size, so a kernel is compared with a copy of its own size;
- a compute-bound one against a measured rate: the fp32 FMA probe (`fp32`), the fp32 peak at the clock
  it ran at (`fp32_peak`), the `mma.sync` probe (`mma`), the `wgmma` probe (`wgmma`), or cuBLAS (`bf16`).

Rates (GB/s, TFLOP/s), the fraction of the ceiling and the speed-up over the baseline are properties:
computed here, never stored apart from the figures they come from. The results file (runner.results)
writes them beside the raw figures for readers of the JSON.
"""
from __future__ import annotations

import dataclasses

# the ceilings a record can name: (unit, key of the rate in the ceilings dict, words for tables)
CEILINGS = {
    "copy": ("GB/s", None, "a copy of the same bytes"),
    "fp32": ("TFLOP/s", "fp32_tflops", "the fp32 FMA probe"),
    "fp32_peak": ("TFLOP/s", "fp32_peak_tflops", "the fp32 peak at the measured clock"),
    "mma": ("TFLOP/s", "mma_tflops", "the mma.sync bf16 probe"),
    "wgmma": ("TFLOP/s", "wgmma_tflops", "the wgmma bf16 probe"),
    "bf16": ("TFLOP/s", "bf16_tflops", "cuBLAS bf16 at 8192^3"),
}
DERIVED = ("gbps", "tflops", "fraction_of_ceiling", "copy_gbps", "speedup")


@dataclasses.dataclass
class Record:
    chapter: str
    op: str
    kernel: str
    shape: list
    dtype: str
    bytes: int
    flops: int
    median_ms: float
    spread_ms: float
    baseline: str | None
    baseline_median_ms: float | None
    ceiling_name: str
    ceiling_value: float                 # GB/s or TFLOP/s; for "copy": the same-size copy's GB/s
    copy_ms: float | None = None         # median of cupy.copyto moving `bytes` (read + write), same run
    recorded_at: str = ""
    note: str = ""

    def __post_init__(self):
        self.shape = list(self.shape)
        if self.ceiling_name not in CEILINGS:
            raise ValueError(f"unknown ceiling {self.ceiling_name!r}: one of {', '.join(CEILINGS)}")

    @property
    def gbps(self) -> float:
        return self.bytes / (self.median_ms * 1e-3) / 1e9

    @property
    def tflops(self) -> float:
        return self.flops / (self.median_ms * 1e-3) / 1e12

    @property
    def copy_gbps(self) -> float | None:
        """GB/s of the same-size copy measured in the same run (None where none was measured)."""
        return self.bytes / (self.copy_ms * 1e-3) / 1e9 if self.copy_ms else None

    @property
    def fraction_of_ceiling(self) -> float:
        """Achieved rate over the ceiling: GB/s for a bandwidth ceiling, TFLOP/s for an arithmetic one."""
        if self.ceiling_value <= 0:
            return 0.0
        achieved = self.gbps if CEILINGS[self.ceiling_name][0] == "GB/s" else self.tflops
        return achieved / self.ceiling_value

    @property
    def speedup(self) -> float | None:
        """Baseline time over this kernel's time: above 1 the kernel beats the library."""
        if not self.baseline_median_ms:
            return None
        return self.baseline_median_ms / self.median_ms

    @property
    def shape_key(self) -> str:
        return "x".join(str(s) for s in self.shape)

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else float("inf")

    @property
    def memory_bound(self) -> bool:
        return CEILINGS[self.ceiling_name][0] == "GB/s"

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["gbps"] = round(self.gbps, 2)
        d["tflops"] = round(self.tflops, 4)
        d["fraction_of_ceiling"] = round(self.fraction_of_ceiling, 5)
        if self.copy_gbps is not None:
            d["copy_gbps"] = round(self.copy_gbps, 2)
        if self.speedup is not None:
            d["speedup"] = round(self.speedup, 4)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Record":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def records_table(records) -> str:
    """A Markdown table of records: one row per kernel and shape, narrow enough for a book page. Rates the
    operation doesn't have (GB/s of a pure-arithmetic probe, TFLOP/s of a copy) are left blank; a
    memory-bound kernel's ceiling is the copy of its own size, shown beside it."""
    head = ("| op | kernel | shape | median ms (IQR) | GB/s | TFLOP/s | of ceiling | × baseline |\n"
            "|---|---|---|--:|--:|--:|--:|---|\n")
    lines = []
    for r in records:
        sp = f"{r.speedup:.2f}× {r.baseline}" if r.speedup is not None else (r.baseline or "")
        gbps = f"{r.gbps:.0f}" if r.bytes else ""
        tflops = f"{r.tflops:.3g}" if r.flops else ""
        ceiling = (f"{100 * r.fraction_of_ceiling:.1f}% of a {r.ceiling_value:.0f} GB/s copy" if r.memory_bound
                   else f"{100 * r.fraction_of_ceiling:.1f}% of {r.ceiling_name}")
        lines.append(f"| {r.op} | {r.kernel} | {r.shape_key} {r.dtype} | {r.median_ms:.4f} ({r.spread_ms:.4f}) | "
                     f"{gbps} | {tflops} | {ceiling} | {sp} |")
    return head + "\n".join(lines) + "\n"
