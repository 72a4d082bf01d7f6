"""Measurement records and the per-GPU results file (labs/results/<gpu-slug>.json).

A record is one kernel at one shape: what it computes (`op`), which version (`kernel`), the bytes and
FLOPs it must move and do, its median time and spread, the library baseline timed in the same run, and
the ceiling (also measured in the same run) it is judged against.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .paths import RESULTS

CEILING_UNITS = {"copy": "GB/s", "fp32": "TFLOP/s", "bf16": "TFLOP/s", "fp32_peak": "TFLOP/s"}


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
    ceiling_value: float
    fraction_of_ceiling: float = 0.0
    recorded_at: str = ""
    note: str = ""

    def __post_init__(self):
        self.shape = list(self.shape)
        if not self.fraction_of_ceiling:
            self.fraction_of_ceiling = fraction_of_ceiling(self)

    @property
    def gbps(self) -> float:
        return self.bytes / (self.median_ms * 1e-3) / 1e9

    @property
    def tflops(self) -> float:
        return self.flops / (self.median_ms * 1e-3) / 1e12

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

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["gbps"] = round(self.gbps, 2)
        d["tflops"] = round(self.tflops, 4)
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Record":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def fraction_of_ceiling(r: Record) -> float:
    """Achieved rate over the ceiling: GB/s for a bandwidth ceiling, TFLOP/s for an arithmetic one."""
    if r.ceiling_value <= 0:
        return 0.0
    achieved = r.gbps if CEILING_UNITS.get(r.ceiling_name) == "GB/s" else r.tflops
    return achieved / r.ceiling_value


def results_path(gpu_slug: str) -> Path:
    return RESULTS / f"{gpu_slug}.json"


def load_results(path: Path) -> dict:
    data = json.loads(Path(path).read_text())
    data["records"] = [Record.from_json(r) for r in data.get("records", [])]
    return data


def save_results(path: Path, gpu: dict, ceilings: dict, records: list[Record], profiles: list | None = None,
                 replace_chapters: set[str] | None = None) -> None:
    """Write the results file. With `replace_chapters`, records of other chapters already there are kept."""
    path = Path(path)
    old = json.loads(path.read_text()) if replace_chapters is not None and path.exists() else {}
    drop = set(replace_chapters or ())          # the file's entries of these chapters are replaced
    kept = [r for r in map(Record.from_json, old.get("records", [])) if r.chapter not in drop]
    kept_profiles = [p for p in old.get("profiles", []) if p.get("chapter") not in drop]
    allrec = sorted(kept + list(records), key=lambda r: (r.chapter, r.op, r.kernel, r.shape_key))
    from .provenance import chapter_sources
    sources = {ch: v for ch, v in old.get("sources", {}).items() if ch not in drop}
    chapter_ceilings = {ch: v for ch, v in old.get("chapter_ceilings", {}).items() if ch not in drop}
    for ch in sorted({r.chapter for r in records}):
        sources[ch] = chapter_sources(ch)       # what these records were measured with
        chapter_ceilings[ch] = ceilings         # the ceilings these records were divided by
    out = {"gpu": gpu, "ceilings": ceilings, "chapter_ceilings": dict(sorted(chapter_ceilings.items())),
           "sources": sources, "records": [r.to_json() for r in allrec],
           "profiles": kept_profiles + list(profiles or [])}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
