"""Nsight Compute readings of each chapter's kernels at the benchmark shapes, for the book.

`python -m labkit profile [--chapter NN]` runs the chapter's benchmarks (full shapes, as `bench` does) once
under `ncu` (clocks left as they are: --clock-control none), with LABKIT_PROFILE=1 so that every timed call
runs exactly once. Each timed call launches a marker kernel first (measure.timing), and the record made from
it logs its op, kernel and shape, so every profiled launch is named by the record it was timed for. For each
of the chapter's own kernel functions and each record, the longest launch is kept.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

from .. import chapters as chapter_modules
from ..measure import ceilings
from ..measure.compile import kernel_names as source_kernel_names
from ..measure.context import Context
from ..measure.device import gpu_info, now_iso
from ..measure.timing import PROFILE_MARKER
from ..paths import KERNELS, ROOT, chapter_dir

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
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "FMA pipe %",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe %",
    # exp2, rsqrt, reciprocals and conversions: what a softmax or a norm may wait for besides memory
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": "XU pipe %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM % of peak",
    # warps stalled per issued instruction, by reason (ncu's WarpStateStats): what a warp waits for
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": "barrier stall",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": "long scoreboard stall",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": "short scoreboard stall",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio": "MIO throttle stall",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio": "math throttle stall",
}


def kernel_names(chapter: str) -> set[str]:
    names = set()
    for f in chapter_dir(KERNELS, chapter).glob("*.cu"):
        names.update(source_kernel_names(f.read_text()))
    return names


def driver(chapter: str) -> None:
    """Run inside ncu: one pass of the chapter's benchmarks at their full shapes, each timed call once.
    No memory pools: ncu saves and restores every live allocation around each replay pass of a profiled
    kernel, and a pool keeps what a baseline once used (chapter 08's naive PyTorch attention leaves ~50 GB
    cached) live; freed at once, a replay copies only the operands in use."""
    import cupy as cp
    cp.cuda.set_allocator(None)
    cp.cuda.set_pinned_memory_allocator(None)
    ctx = Context(ceilings.measure(verbose=False), gpu_info(), quick=False)
    for _ in chapter_modules.module(chapter).benchmarks(ctx):
        pass


def _num(s: str):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def attribute(rows: list[dict], records: dict[int, dict]) -> dict:
    """{(function, op, kernel, shape): metric values of its longest launch} from ncu's rows in launch
    order: the k-th marker row opens timed call k, whose record `records[k]` names the launches after it."""
    best: dict = {}
    call = 0
    for row in rows:
        name = row.get("Kernel Name", "").split("(")[0].strip()
        if name == PROFILE_MARKER:
            call += 1
            continue
        vals = {m: _num(row.get(m, "")) for m in METRICS}
        rec = records.get(call)
        if vals["gpu__time_duration.sum"] is None or rec is None:
            continue
        key = (name, rec["op"], rec["kernel"], rec["shape"])
        if key not in best or vals["gpu__time_duration.sum"] > best[key]["gpu__time_duration.sum"]:
            best[key] = vals
    return best


def readings(best: dict, chapter: str, now: str) -> list[dict]:
    out = []
    for (name, op, kernel, shape), v in sorted(best.items()):
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
        out.append({"chapter": chapter, "kernel": name, "op": op, "record": kernel, "shape": shape, "metrics": m,
                    "tool": "ncu --clock-control none", "recorded_at": now})
    return out


def run(chapter: str, ncu: str | None = None, timeout: float = 420) -> list[dict]:
    ncu = ncu or shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    names = sorted(kernel_names(chapter) | {PROFILE_MARKER})
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "records.jsonl")
        env = dict(os.environ, LABKIT_PROFILE="1", LABKIT_PROFILE_LOG=log, PYTORCH_NO_CUDA_MEMORY_CACHING="1",
                   PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        cmd = [ncu, "--clock-control", "none", "--csv", "--page", "raw", "--print-units", "base",
               "--metrics", ",".join(METRICS), "--nvtx", "--nvtx-include", "labkit-timed/",
               "--kernel-name", "regex:^(" + "|".join(names) + ")$",
               sys.executable, "-c", f"from labkit.runner.profile import driver; driver({chapter!r})"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"ncu failed for chapter {chapter}:\n{r.stderr[-3000:]}\n{r.stdout[-2000:]}")
        records = {}
        if os.path.exists(log):
            for line in open(log):
                d = json.loads(line)
                records[d["id"]] = d
    text = r.stdout[r.stdout.find('"ID"'):]
    rows = list(csv.DictReader(io.StringIO(text)))
    if rows and _num(rows[0].get("gpu__time_duration.sum") or "x") is None:
        rows = rows[1:]                        # the units row
    return readings(attribute(rows, records), chapter, now_iso())
