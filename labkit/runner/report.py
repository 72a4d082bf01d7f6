"""Recorded measurements shown in the book: tables, rooflines, profiler readings and glued numbers.

Runs without a GPU: it only reads labs/results/<gpu>.json, which the GPU runner writes.
"""
from __future__ import annotations

import re

from .. import chapters
from ..measure.records import records_table
from ..paths import RESULTS
from .results import load_results

DEFAULT_GPU = "nvidia-h200"
CEILING_KEYS = ("copy_gbps", "fp32_tflops", "fp32_peak_tflops", "mma_tflops", "wgmma_tflops", "bf16_tflops")


def metric_key(column: str) -> str:
    """A profile column as a glue key: 'FMA pipe %' -> 'fma_pipe_pct', 'DRAM read MB' -> 'dram_read_mb'."""
    return re.sub(r"[^a-z0-9]+", "_", column.lower().replace("%", "pct").replace("/", " per ")).strip("_")


class Recorded:
    """The records of one chapter on one GPU, as recorded by `python -m labkit bench`."""

    def __init__(self, chapter: str, gpu: str = DEFAULT_GPU):
        path = RESULTS / f"{gpu}.json"
        if not path.exists():
            raise FileNotFoundError(f"no recorded results at {path}: run `python -m labkit bench --json {path}` "
                                    "on a GPU")
        data = load_results(path)
        self.chapter = chapter
        self.gpu = data["gpu"]
        # Each record carries the ceiling it was divided by, measured in its chapter's own benchmark run.
        # The file's top-level ceilings are those of the latest run (any chapter); a chapter's page quotes
        # the ones from its own run: all of them where the file kept them per chapter, else the copy
        # ceiling its records carry.
        own = data.get("chapter_ceilings", {}).get(chapter)
        self.ceilings = dict(own or data["ceilings"])
        self.same_run = set(self.ceilings) if own else set()
        self.records = [r for r in data["records"] if r.chapter == chapter]
        self.profiles = [p for p in data.get("profiles", []) if p.get("chapter") == chapter]
        self.headline = chapters.headline(chapter)   # the shape each op's plain glue keys refer to
        if not self.records:
            raise LookupError(f"{path.name} holds no records of chapter {chapter}")
        if not own:
            copy = {r.ceiling_value for r in self.records if r.ceiling_name == "copy"}
            if len(copy) == 1:
                self.ceilings["copy_gbps"] = copy.pop()
                self.same_run = {"copy_gbps"}

    # ------------------------------------------------------------------------------------ glue
    def values(self) -> dict[str, float]:
        v = {f"ceiling.{k}": self.ceilings[k] for k in CEILING_KEYS if self.ceilings.get(k)}
        for r in self.records:
            head = self.headline.get(r.op)
            keys = [f"{r.op}.{r.kernel}@{r.shape_key}"]
            if head is None or r.shape_key == head:
                keys.append(f"{r.op}.{r.kernel}")
            for k in keys:
                v[f"{k}.ms"] = r.median_ms
                v[f"{k}.gbps"] = r.gbps
                v[f"{k}.tflops"] = r.tflops
                v[f"{k}.pct"] = 100 * r.fraction_of_ceiling
                if r.speedup is not None:
                    v[f"{k}.xbase"] = r.speedup
                if r.copy_gbps is not None:
                    v[f"{k}.copy_gbps"] = r.copy_gbps
        # profiler readings: profile.<op>.<record kernel>[@shape].<metric>, e.g. profile.sgemm.tuned.fma_pipe_pct
        for p in self.profiles:
            if "record" not in p:
                continue
            keys = [f"profile.{p['op']}.{p['record']}@{p['shape']}"]
            if self.headline.get(p["op"]) in (None, p["shape"]):
                keys.append(f"profile.{p['op']}.{p['record']}")
            for metric, x in p["metrics"].items():
                if isinstance(x, (int, float)):
                    for k in keys:
                        v.setdefault(f"{k}.{metric_key(metric)}", x)      # the first kernel of a record wins
        return v

    def glue_all(self):
        from myst_nb import glue
        for k, val in self.values().items():
            glue(k, val, display=False)
        glue("gpu.name", self.gpu["name"], display=False)
        glue("gpu.date", self.date, display=False)

    @property
    def date(self) -> str:
        return min(r.recorded_at for r in self.records)[:10]

    # ----------------------------------------------------------------------------------- display
    def provenance(self):
        g = self.gpu
        text = (f"Measured on **{g['name']}** (compute capability {g['compute_capability']}, {g['sm_count']} SMs, "
                f"driver {g.get('driver')}, CUDA runtime {g.get('cuda_runtime')}, CuPy {g.get('cupy')}"
                + (f", PyTorch {g['torch']}" if g.get("torch") else "")
                + f") on {self.date}. ")
        c = self.ceilings
        named = {"copy_gbps": f"copy {c['copy_gbps']:.0f} GB/s", "fp32_tflops": f"fp32 FMA {c['fp32_tflops']:.1f} TFLOP/s",
                 "bf16_tflops": f"bf16 matmul {c['bf16_tflops']:.0f} TFLOP/s"}
        same = [v for k, v in named.items() if k in self.same_run]
        other = [v for k, v in named.items() if k not in self.same_run]
        if same:
            text += f"Measured in the same run: {', '.join(same)}. "
        if other:
            when = str(c.get("measured_at", ""))[:16].replace("T", " ")
            text += f"Roofs drawn from another run on the same GPU{f' ({when} UTC)' if when else ''}: {', '.join(other)}."
        return _markdown(text)

    def rows(self, op: str | None = None):
        return [r for r in self.records if op is None or r.op == op]

    def table(self, op: str | None = None):
        return _markdown(records_table(self.rows(op)))

    def headline_rows(self, op: str | None = None):
        """The records of `op` (or all) at their op's headline shape (every shape where none is declared)."""
        return [r for r in self.rows(op) if self.headline.get(r.op) in (None, r.shape_key)]

    def roofline(self, op: str | None = None, title: str | None = None, roofs=None, records=None):
        """The roofline and bandwidth chart of the chapter's records at their headline shapes (or of
        `records`), against the ceilings of the chapter's own run."""
        import matplotlib.pyplot as plt
        from ..measure.ceilings import datasheet_for
        from ..measure.roofline import figure
        ds = datasheet_for(self.gpu["name"])
        figure(self.headline_rows(op) if records is None else records, self.ceilings, ds[1] if ds else None,
               roofs=roofs, title=title or f"chapter {self.chapter}, {self.gpu['name']}, {self.date}")
        plt.show()

    def profile(self, ops=None):
        """The profiler readings (of the records of `ops` only, when given) as a table."""
        profiles = [p for p in self.profiles if ops is None or p.get("op") in ops]
        if not profiles:
            raise LookupError(f"no profiler readings recorded for chapter {self.chapter}"
                              + (f" and ops {', '.join(ops)}" if ops else ""))
        cols = list(dict.fromkeys(c for p in profiles for c in p["metrics"]))
        head = "| kernel | measured for | " + " | ".join(cols) + " |\n|---|---|" + "---|" * len(cols) + "\n"
        body = "".join(f"| {p['kernel']} | {p.get('op', '')} {p.get('record', '')} at {p.get('shape', '?')} | "
                       + " | ".join(str(p["metrics"].get(c, "")) for c in cols) + " |\n" for p in profiles)
        return _markdown(head + body + f"\nNsight Compute (`{profiles[0].get('tool', 'ncu')}`) on "
                         f"{self.gpu['name']}, {profiles[0].get('recorded_at', '')[:10]}: one launch of each "
                         "kernel at the benchmark shape named beside it, the shape of the table above.")


def _markdown(text: str):
    from IPython.display import Markdown
    return Markdown(text)
