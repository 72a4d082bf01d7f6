"""The `// Result (...)` lines that open a kernel file, generated from a results file, never typed.

Every kernel file opens with its idea, its prediction and its recorded result. The result is a header line
naming the GPU, the date, the results file and the op, then one line per kernel version and shape:

    // Result (NVIDIA H200, 2026-11-30, labs/results/nvidia-h200.json, op "copy"):
    //   copy_vec128 at 134217728: 0.2766 ms, 3881 GB/s, 94.2% of copy, 0.94x cupy.copyto

The lines say which records a file shows; `refresh` rewrites their figures from the records of the file's
chapter. `python -m labkit bench --json` and `gpu-check` call it; a CPU test checks that no figure drifted.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .errors import LabkitError
from .paths import KERNELS, ROOT

HEADER = re.compile(r'^// Result \((?P<gpu>[^,]+), (?P<date>[\d-]+), (?P<file>\S+\.json), op "(?P<op>\w+)"\):$')
ENTRY = re.compile(r"^//   (?P<kernel>\w+) at (?P<shape>\d+(?:x\d+)*): ")


def shape_text(shape) -> str:
    return "x".join(str(int(s)) for s in shape)


def entry_line(r: dict) -> str:
    ms = r["median_ms"]
    rate = f"{r['bytes'] / ms / 1e6:.0f} GB/s" if r["bytes"] else f"{r['flops'] / ms / 1e9:.1f} TFLOP/s"
    vs = f", {r['baseline_median_ms'] / ms:.2f}x {r['baseline']}" if r.get("baseline_median_ms") else ""
    return (f"//   {r['kernel']} at {shape_text(r['shape'])}: {ms:.4f} ms, {rate}, "
            f"{100 * r['fraction_of_ceiling']:.1f}% of {r['ceiling_name']}{vs}")


def refreshed(path: Path, loaded: dict | None = None) -> str:
    """The text of kernel file `path` with its result lines rewritten from the results file they name."""
    path = Path(path)
    chapter = path.parent.name[:2]
    loaded = {} if loaded is None else loaded
    lines, op, data = path.read_text().split("\n"), None, None
    for i, line in enumerate(lines):
        if m := HEADER.match(line):
            op = m["op"]
            if m["file"] not in loaded:
                loaded[m["file"]] = json.loads((ROOT / m["file"]).read_text())
            data, header_at, dates = loaded[m["file"]], i, []
            lines[i] = f'// Result ({data["gpu"]["name"]}, {m["date"]}, {m["file"]}, op "{op}"):'
        elif op and (m := ENTRY.match(line)):
            found = [r for r in data["records"] if r["chapter"] == chapter and r["op"] == op
                     and r["kernel"] == m["kernel"] and shape_text(r["shape"]) == m["shape"]]
            if len(found) != 1:
                raise LabkitError(f"{path.relative_to(ROOT)}: line {i + 1} shows {m['kernel']} at {m['shape']}, "
                                  f"but the results file has {len(found)} chapter {chapter} records of it "
                                  f"(op \"{op}\")")
            lines[i] = entry_line(found[0])
            dates.append(found[0]["recorded_at"][:10])
            lines[header_at] = lines[header_at].replace(HEADER.match(lines[header_at])["date"], max(dates), 1)
        else:
            op = None
    return "\n".join(lines)


def refresh(files=None) -> list[Path]:
    """Rewrite the result lines of kernel files (default: all); returns the files that changed."""
    changed, loaded = [], {}
    for f in sorted(files or KERNELS.rglob("*.cu")):
        text = refreshed(f, loaded)
        if text != Path(f).read_text():
            Path(f).write_text(text)
            changed.append(Path(f))
    return changed
