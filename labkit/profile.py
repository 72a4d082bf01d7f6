"""Nsight Compute readings of each chapter's kernels, recorded into the results file for the book.

`python -m labkit profile [--chapter NN]` runs the chapter's benchmarks once under `ncu` (clocks left as
they are: --clock-control none), with LABKIT_PROFILE=1 so that every timed call runs exactly once, and keeps
for each of the chapter's own kernels the reading of its largest launch (the benchmark shape).
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys

from .paths import KERNELS, ROOT, chapter_dir

METRICS = {  # ncu metric -> column shown in the book
    "gpu__time_duration.sum": "duration us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM % of peak",
    "dram__bytes_read.sum": "DRAM read MB",
    "dram__bytes_write.sum": "DRAM write MB",
    "lts__t_sector_hit_rate.pct": "L2 hit %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
    "launch__registers_per_thread": "regs/thread",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "ld sectors",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "ld requests",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "smem bank conflicts",
}


def kernel_names(chapter: str) -> set[str]:
    names = set()
    for f in chapter_dir(KERNELS, chapter).glob("*.cu"):
        names.update(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)", f.read_text()))
    return names


def driver(chapter: str) -> None:
    """Run inside ncu: one pass of the chapter's benchmarks, each timed call executed once."""
    import importlib
    from . import ceilings
    from .bench import CHAPTERS, Context
    from .device import gpu_info
    ctx = Context(ceilings.measure(verbose=False), gpu_info(), quick=True)
    if chapter == "01":
        from .timing import bench
        bench(ceilings.fma_launch()[0])
    for _ in importlib.import_module(CHAPTERS[chapter]).benchmarks(ctx):
        pass


def _num(s: str):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def run(chapter: str, ncu: str | None = None, timeout: float = 150) -> list[dict]:
    ncu = ncu or shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    env = dict(os.environ, LABKIT_PROFILE="1", PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    names = kernel_names(chapter)
    cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(METRICS),
           "--nvtx", "--nvtx-include", "labkit-timed/",
           "--kernel-name", "regex:^(" + "|".join(sorted(names)) + ")$",
           sys.executable, "-c", f"from labkit.profile import driver; driver({chapter!r})"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"ncu failed for chapter {chapter}:\n{r.stderr[-3000:]}\n{r.stdout[-2000:]}")
    text = r.stdout[r.stdout.find('"ID"'):]
    rows = list(csv.DictReader(io.StringIO(text)))
    best: dict[str, dict] = {}
    for row in rows[1:] if rows and not _num(rows[0].get("gpu__time_duration.sum", "x") or "x") else rows:
        name = row.get("Kernel Name", "").split("(")[0]
        vals = {m: _num(row.get(m, "")) for m in METRICS}
        if vals["gpu__time_duration.sum"] is None:
            continue
        if name not in best or vals["gpu__time_duration.sum"] > best[name]["gpu__time_duration.sum"]:
            best[name] = vals
    from .device import now_iso
    out = []
    for name, v in sorted(best.items()):
        m = {}
        for metric, col in METRICS.items():
            x = v.get(metric)
            if x is None:
                continue
            if col.endswith("MB"):
                x = x / 1e6                    # base units: bytes
            if col == "duration us":
                x = x / 1e3                    # base units: ns
            m[col] = round(x, 1) if abs(x) >= 1 else round(x, 3)
        if v.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"):
            m["sectors/request"] = round(v["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"]
                                         / v["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"], 2)
        out.append({"chapter": chapter, "kernel": name, "metrics": m, "tool": "ncu --clock-control none",
                    "recorded_at": now_iso()})
    return out
