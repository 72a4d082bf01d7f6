"""The per-GPU results file, labs/results/<gpu-slug>.json: its one owner.

It holds, per chapter, the records of the chapter's last benchmark run, the ceilings measured in that run,
the hashes of the sources the records were measured with, and the Nsight Compute readings. The benchmark
(`put_records`) and the profiler (`put_profiles`) both write through this module; each replaces only the
chapters it measured, so a chapter can be re-measured alone.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..measure.records import Record
from ..paths import RESULTS
from .provenance import chapter_sources


def results_path(gpu_slug: str) -> Path:
    return RESULTS / f"{gpu_slug}.json"


def read_raw(path) -> dict:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else {}


def load_results(path) -> dict:
    """The file's contents with `records` as Record objects."""
    data = json.loads(Path(path).read_text())
    data["records"] = [Record.from_json(r) for r in data.get("records", [])]
    return data


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def put_records(path, gpu: dict, ceilings: dict, records: list[Record]) -> None:
    """Replace the records of the chapters in `records` (and their ceilings, source hashes and profiles,
    which described the replaced records) and keep every other chapter's."""
    path = Path(path)
    old = read_raw(path)
    chapters = {r.chapter for r in records}
    kept = [r for r in map(Record.from_json, old.get("records", [])) if r.chapter not in chapters]
    allrec = sorted(kept + list(records), key=lambda r: (r.chapter, r.op, r.kernel, r.shape_key))
    sources = {ch: v for ch, v in old.get("sources", {}).items() if ch not in chapters}
    chapter_ceilings = {ch: v for ch, v in old.get("chapter_ceilings", {}).items() if ch not in chapters}
    for ch in sorted(chapters):
        sources[ch] = chapter_sources(ch)       # what these records were measured with
        chapter_ceilings[ch] = ceilings         # the ceilings measured in the same run
    _write(path, {"gpu": gpu, "ceilings": ceilings, "chapter_ceilings": dict(sorted(chapter_ceilings.items())),
                  "sources": dict(sorted(sources.items())), "records": [r.to_json() for r in allrec],
                  "profiles": [p for p in old.get("profiles", []) if p.get("chapter") not in chapters]})


def put_profiles(path, profiles: list[dict]) -> None:
    """Replace the profiler readings of the chapters in `profiles`."""
    path = Path(path)
    data = read_raw(path)
    if not data:
        raise FileNotFoundError(f"{path}: no results file to add profiles to (run the benchmarks first)")
    done = {p["chapter"] for p in profiles}
    data["profiles"] = [p for p in data.get("profiles", []) if p["chapter"] not in done] + list(profiles)
    _write(path, data)
