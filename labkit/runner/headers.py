"""The `// Result (...)` lines that open a kernel file, generated from a results file, never typed.

Every kernel file opens with its idea, its prediction and its recorded result. The result is a header line
naming the GPU, the date, the results file and the op, then one line per kernel version and shape:

    // Result (NVIDIA H200, 2026-11-30, labs/results/nvidia-h200.json, op "copy"):
    //   copy_vec128 at 134217728: 0.2766 ms, 3881 GB/s, 94.2% of copy, 0.94x cupy.copyto

The lines say which records a file shows; `refresh` rewrites their figures from the records of the file's
chapter. `python -m labkit bench --json` and `gpu-check` call it; a CPU test checks that no figure drifted.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import LabkitError
from ..paths import KERNELS, ROOT
from ..measure.records import Record
from .results import load_results

HEADER = re.compile(r'^// Result \((?P<gpu>[^,]+), (?P<date>[\d-]+), (?P<file>\S+\.json), op "(?P<op>\w+)"\):$')
ENTRY = re.compile(r"^//   (?P<kernel>\w+) at (?P<shape>\d+(?:x\d+)*): ")


def entry_line(r: Record) -> str:
    rate = f"{r.gbps:.0f} GB/s" if r.memory_bound and r.bytes else f"{r.tflops:.1f} TFLOP/s"
    vs = f", {r.speedup:.2f}x {r.baseline}" if r.speedup else ""
    return (f"//   {r.kernel} at {r.shape_key}: {r.median_ms:.4f} ms, {rate}, "
            f"{100 * r.fraction_of_ceiling:.1f}% of {r.ceiling_name}{vs}")


def refreshed(path: Path, loaded: dict | None = None) -> str:
    """The text of kernel file `path` with its result lines rewritten from the results file they name."""
    path = Path(path)
    chapter = path.parent.name[:2]
    loaded = {} if loaded is None else loaded
    lines = path.read_text().split("\n")
    header = None                                   # (line index, its match, the records' dates) of the open group
    for i, line in enumerate(lines + [""]):         # the empty sentinel closes a group at the end of the file
        if header and not ENTRY.match(line):
            at, m, dates = header
            lines[at] = (f'// Result ({loaded[m["file"]]["gpu"]["name"]}, {max(dates, default=m["date"])}, '
                         f'{m["file"]}, op "{m["op"]}"):')
            header = None
        if m := HEADER.match(line):
            if m["file"] not in loaded:
                loaded[m["file"]] = load_results(ROOT / m["file"])
            header = (i, m, [])
        elif header and (e := ENTRY.match(line)):
            op = header[1]["op"]
            found = [r for r in loaded[header[1]["file"]]["records"] if r.chapter == chapter and r.op == op
                     and r.kernel == e["kernel"] and r.shape_key == e["shape"]]
            if len(found) != 1:
                raise LabkitError(f"{path.relative_to(ROOT)}: line {i + 1} shows {e['kernel']} at {e['shape']}, "
                                  f"but the results file has {len(found)} chapter {chapter} records of it "
                                  f"(op \"{op}\")")
            lines[i] = entry_line(found[0])
            header[2].append(found[0].recorded_at[:10])
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
