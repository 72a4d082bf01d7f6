"""Recorded measurements shown in the book: tables, rooflines, profiler readings and glued numbers.

Runs without a GPU: it only reads labs/results/<gpu>.json, which the GPU runner writes.
"""
from __future__ import annotations

import dataclasses
import re

from .. import chapters
from ..errors import LabkitError
from ..measure.records import CEILINGS, Record, records_table
from ..paths import RESULTS
from .results import load_results, read_raw

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
        return _markdown(records_table(self.ladder(op)))

    def ladder(self, op: str | None = None):
        """The records of `op` (or all) in the order a reader climbs them: per op, the headline shape first,
        then the others as recorded; within a shape, slowest to fastest."""
        rows = self.rows(op)
        ops = list(dict.fromkeys(r.op for r in rows))
        shapes = list(dict.fromkeys(r.shape_key for r in rows))

        def key(r):
            return (ops.index(r.op), r.shape_key != self.headline.get(r.op), shapes.index(r.shape_key),
                    -r.median_ms)
        return sorted(rows, key=key)

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


class Course:
    """Records picked across chapters, side by side: the recap's table, its one roofline and its glued numbers.

    `picks` is a list of (chapter, op, kernel, shape key or None, label): None stands for the op's headline
    shape in its chapter; the label (letters, digits, '_' and '-') names the pick in the table, on the
    figure and in the glue keys course.<label>.<metric>."""

    def __init__(self, picks, gpu: str = DEFAULT_GPU):
        self.chapters: dict[str, Recorded] = {}
        self.picks: list[tuple[str, str, Record]] = []          # (label, chapter, record)
        for chapter, op, kernel, shape, label in picks:
            where = (f"chapter {chapter}, op {op!r}, kernel {kernel!r} at "
                     + (f"shape {shape}" if shape else "its headline shape"))
            if not re.fullmatch(r"[A-Za-z0-9_-]+", label) or label in [p[0] for p in self.picks]:
                raise ValueError(f"pick {where}: label {label!r} is not a new name of letters, digits, '_', '-'")
            if chapter not in self.chapters:
                try:
                    self.chapters[chapter] = Recorded(chapter, gpu)
                except (LookupError, LabkitError) as e:      # a chapter with no records, or no such chapter
                    raise LookupError(f"no record of {where}: {e}") from e
            rows = self.chapters[chapter].headline_rows(op) if shape is None else self.chapters[chapter].rows(op)
            found = [r for r in rows if r.kernel == kernel and shape in (None, r.shape_key)]
            if len(found) != 1:
                raise LookupError(f"no record of {where} in {gpu}.json" if not found else
                                  f"{where} names {len(found)} records: give the shape")
            self.picks.append((label, chapter, found[0]))
        if not self.picks:
            raise ValueError("a Course needs at least one pick")
        self.gpu = next(iter(self.chapters.values())).gpu
        # The roofs of the figure. Every percentage in the table and the glued values divides by the ceiling
        # of the record's own chapter run, kept in the record; one figure can draw one set of roofs only. It
        # draws the file's top-level ceilings, those of the latest run (copy, fp32 FMA, mma.sync and, from
        # chapter 06 on, wgmma), since all runs measured the same GPU with the same probes. The runs of
        # chapters 01-05 measured no wgmma roof, so if the latest run is one of them the wgmma roof comes
        # from the latest chapter run that measured it: without that roof the Hopper kernels of chapters 07
        # and 08 would stand above every roof drawn.
        raw = read_raw(RESULTS / f"{gpu}.json")
        self.ceilings = dict(raw["ceilings"])
        if not self.ceilings.get("wgmma_tflops"):
            runs = sorted((c for c in raw.get("chapter_ceilings", {}).values() if c.get("wgmma_tflops")),
                          key=lambda c: str(c.get("measured_at", "")))
            if runs:
                self.ceilings["wgmma_tflops"] = runs[-1]["wgmma_tflops"]

    @property
    def dates(self) -> tuple[str, str]:
        """The first and the last day of the chapters' runs."""
        days = [r.date for r in self.chapters.values()]
        return min(days), max(days)

    def values(self) -> dict[str, float]:
        """course.<label>.ms, .pct (of the record's own ceiling), .xbase (where it has a baseline), and
        .gbps for a memory-bound record or .tflops for a compute-bound one."""
        v = {}
        for label, _, r in self.picks:
            v[f"course.{label}.ms"] = r.median_ms
            v[f"course.{label}.pct"] = 100 * r.fraction_of_ceiling
            if r.memory_bound:
                v[f"course.{label}.gbps"] = r.gbps
            else:
                v[f"course.{label}.tflops"] = r.tflops
            if r.speedup is not None:
                v[f"course.{label}.xbase"] = r.speedup
        return v

    def glue_all(self):
        from myst_nb import glue
        for k, val in self.values().items():
            glue(k, val, display=False)

    def table(self):
        head = ("| ch | pick | record | shape | median ms | rate | of its ceiling | × baseline |\n"
                "|---|---|---|---|--:|--:|---|---|\n")
        lines = []
        for label, chapter, r in self.picks:
            rate = f"{r.gbps:.0f} GB/s" if r.memory_bound else f"{r.tflops:.3g} TFLOP/s"
            ceiling = (f"{100 * r.fraction_of_ceiling:.1f}% of a {r.ceiling_value:.0f} GB/s copy" if r.memory_bound
                       else f"{100 * r.fraction_of_ceiling:.1f}% of {CEILINGS[r.ceiling_name][2]}")
            base = f"{r.speedup:.2f}× {r.baseline}" if r.speedup is not None else ""
            lines.append(f"| {chapter} | {label} | {r.op}: {r.kernel} | {r.shape_key} {r.dtype} | {r.median_ms:.4f} | "
                         f"{rate} | {ceiling} | {base} |")
        return _markdown(head + "\n".join(lines) + "\n")

    def figure(self, title: str | None = None, roofs=None):
        """The roofline and bandwidth chart of every pick (a matplotlib Figure), each point named
        'chapter: label'."""
        from ..measure.ceilings import datasheet_for
        from ..measure.roofline import figure
        ds = datasheet_for(self.gpu["name"])
        # the figure names a point "op: kernel"; copies of the records named by chapter and label
        points = [dataclasses.replace(r, op=chapter, kernel=label) for label, chapter, r in self.picks]
        first, last = self.dates
        days = first if first == last else f"{first} to {last}"
        return figure(points, self.ceilings, ds[1] if ds else None, roofs=roofs,
                      title=title or f"the course, {self.gpu['name']}, {days}")

    def roofline(self, title: str | None = None, roofs=None):
        import matplotlib.pyplot as plt
        self.figure(title, roofs)
        plt.show()


def _markdown(text: str):
    from IPython.display import Markdown
    return Markdown(text)
