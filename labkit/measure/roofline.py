"""The course's one plotting module for measurements: the Roofline and, beside it, the bandwidth chart.

- The Roofline (log-log): measured roofs solid, datasheet roofs dashed, each roof named with its rate
  (copy bandwidth; fp32 FMA; the tensor roofs `mma.sync` and, on Hopper, `wgmma`), ridge points marked.
  Only measured kernels are drawn as filled markers, each numbered, with a table of the numbers beside the
  plot (readable with any number of points); computed bounds and predictions are hollow grey markers,
  labelled as such.
- The bandwidth chart: one bar per memory-bound record, its GB/s as a percentage of a copy of the same
  bytes measured in the same run (records.Record.fraction_of_ceiling), so kernels that do no arithmetic
  (copies, transposes) are shown too.

`figure(records, ceilings, datasheet)` draws whichever of the two the records call for. Points are
records.Record objects, or dicts {label, intensity, tflops, kind="bound"|"prediction"} for computed ones.
"""
from __future__ import annotations

import math
from typing import Iterable

from .ceilings import ridge_point

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
          "#7f7f7f", "#bcbd22"]
# roofs: (key in the measured ceilings, key in a datasheet row, words, colour)
ROOFS = {
    "fp32": ("fp32_tflops", "fp32_tflops", "fp32 FMA", "#555555"),
    "mma": ("mma_tflops", None, "bf16 mma.sync", "#1b7837"),
    "wgmma": ("wgmma_tflops", "bf16_tflops", "bf16 wgmma", "#762a83"),
    "bf16": ("bf16_tflops", "bf16_tflops", "bf16 cuBLAS", "#b35806"),
}
UNMEASURED = ("bound", "prediction")


def roof(intensity: float, bandwidth_gbps: float, peak_tflops: float) -> float:
    """Attainable TFLOP/s at an arithmetic intensity (FLOP/byte)."""
    return min(peak_tflops, intensity * bandwidth_gbps * 1e9 / 1e12)


def _point(p) -> dict:
    """A point from a Record (measured) or a dict (measured unless its kind says bound or prediction)."""
    if hasattr(p, "intensity"):
        return {"label": f"{p.op}: {p.kernel}", "intensity": p.intensity, "tflops": p.tflops,
                "shape": p.shape_key, "kind": "measured"}
    q = dict(p)
    q.setdefault("kind", "measured")
    return q


def labelled(points) -> list[dict]:
    """Points with unique labels: a kernel measured at several shapes gets its shape in the label."""
    pts = [_point(p) for p in points]
    seen = [q["label"] for q in pts]
    for q in pts:
        if seen.count(q["label"]) > 1 and q.get("shape"):
            q["label"] = f"{q['label']} @ {q['shape']}"
    return pts


def roofline(ax, points: Iterable = (), measured: dict | None = None, datasheet: dict | None = None, *,
             roofs=None, title: str | None = None, xlim=(1 / 8, 1024), table_ax=None):
    """Draw the roofline on `ax`; the numbered points' table on `table_ax` (or in the legend when None).
    `roofs` names the compute roofs to draw (default: fp32, and the tensor roofs measured on this GPU)."""
    measured = measured or {}
    pts = [q for q in labelled(points) if q["tflops"] > 0 and q["intensity"] > 0]
    finite = [q["intensity"] for q in pts if math.isfinite(q["intensity"])]
    if finite:
        xlim = (min(xlim[0], min(finite) / 2), max(xlim[1], max(finite) * 2))
    for q in pts:        # arithmetic probes move no DRAM bytes: infinite intensity, drawn at the right edge
        if not math.isfinite(q["intensity"]):
            q["intensity"], q["edge"] = xlim[1] / 1.6, True
    xs = [xlim[0] * (xlim[1] / xlim[0]) ** (i / 240) for i in range(241)]
    if roofs is None:
        roofs = [r for r in ("fp32", "mma", "wgmma") if measured.get(ROOFS[r][0])] or ["fp32"]
    peaks = []
    bw = measured.get("copy_gbps")
    for name in roofs:
        mkey, dkey, words, color = ROOFS[name]
        if bw and measured.get(mkey):
            peak = measured[mkey]
            ax.plot(xs, [roof(x, bw, peak) for x in xs], "-", color=color, lw=1.8,
                    label=f"measured {words}: {peak:.0f} TFLOP/s" if peak >= 10 else
                          f"measured {words}: {peak:.1f} TFLOP/s")
            peaks.append(peak)
            r = ridge_point(peak, bw)
            ax.plot([r], [peak], "o", mfc="white", mec=color, ms=6, zorder=5)
        if datasheet and dkey and datasheet.get(dkey):
            ds = datasheet[dkey]
            ax.plot(xs, [roof(x, datasheet["bandwidth_gbps"], ds) for x in xs], "--", color=color, lw=1.0,
                    alpha=0.7, label=f"datasheet {words.split()[0]}: {ds:.0f} TFLOP/s")
            peaks.append(ds)
    if bw:
        ax.annotate(f"measured copy {bw:.0f} GB/s", (xs[8], roof(xs[8], bw, 1e9)), textcoords="offset points",
                    xytext=(4, 6), rotation=0, fontsize=7, color="#333333")
    rows = []
    for i, q in enumerate(pts, 1):
        if q["kind"] in UNMEASURED:
            ax.plot([q["intensity"]], [q["tflops"]], "o", mfc="none", mec="#888888", ms=8, zorder=6)
        else:
            ax.plot([q["intensity"]], [q["tflops"]], "o", color=COLORS[(i - 1) % len(COLORS)], ms=7, zorder=6)
        ax.annotate(str(i), (q["intensity"], q["tflops"]), textcoords="offset points", xytext=(5, 3), fontsize=7,
                    color="#888888" if q["kind"] in UNMEASURED else "black", zorder=7)
        kind = "" if q["kind"] == "measured" else f" ({q['kind']}, not measured)"
        where = "(no DRAM bytes: at the right edge)" if q.get("edge") else f"at {q['intensity']:.3g} FLOP/B"
        rows.append(f"{i:>2d}  {q['label']}{kind}: {q['tflops']:.3g} TFLOP/s {where}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=10)
    ax.set_xlim(*xlim)
    top = max(peaks + [q["tflops"] for q in pts] + [1.0])
    low = min([q["tflops"] for q in pts] + [top / 1e3])
    ax.set_ylim(10 ** math.floor(math.log10(low / 2)), top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s (measured kernels: filled)")
    ax.grid(True, which="major", ls=":", lw=0.6)
    ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    if title:
        ax.set_title(title, fontsize=10)
    if table_ax is not None:
        table_ax.axis("off")
    if rows:
        _table(table_ax, rows) if table_ax is not None else ax.text(
            1.02, 1.0, "\n".join(rows), transform=ax.transAxes, va="top", fontsize=7, family="monospace")
    return ax


def _table(ax, rows):
    ax.text(0.0, 1.0, "\n".join(rows), va="top", ha="left", fontsize=7, family="monospace", transform=ax.transAxes)


def bandwidth(ax, records, *, title: str | None = None):
    """Horizontal bars: each memory-bound record's GB/s as a % of a same-size copy measured in its run."""
    recs = [r for r in records if getattr(r, "memory_bound", False) and r.bytes]
    labels = [q["label"] for q in labelled(recs)]
    vals = [100 * r.fraction_of_ceiling for r in recs]
    ys = list(range(len(recs)))[::-1]
    ax.barh(ys, vals, color=[COLORS[i % len(COLORS)] for i in range(len(recs))], height=0.7)
    for y, v, r in zip(ys, vals, recs):
        ax.text(v + 1, y, f"{v:.0f}%  ({r.gbps:.0f} of {r.ceiling_value:.0f} GB/s)", va="center", fontsize=7)
    ax.set_yticks(ys, labels, fontsize=7)
    ax.axvline(100, color="black", lw=1, ls="--")
    ax.set_xlim(0, max([115.0] + [v + 35 for v in vals]))
    ax.set_xlabel("% of a copy of the same bytes, measured in the same run")
    ax.grid(True, axis="x", ls=":", lw=0.6)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def figure(records=(), measured: dict | None = None, datasheet: dict | None = None, *, title: str | None = None,
           extra=(), roofs=None):
    """A figure for a set of records: the roofline of those with FLOPs (plus `extra` points, e.g. bounds),
    with the numbered-points table, and the bandwidth chart of the memory-bound ones. Returns the Figure."""
    import matplotlib.pyplot as plt
    records = list(records)
    flops = [r for r in records if r.flops] + list(extra)
    membound = [r for r in records if getattr(r, "memory_bound", False) and r.bytes]
    n_rows = len(labelled(flops))
    panels = [p for p, want in (("roof", bool(flops)), ("bw", bool(membound))) if want] or ["roof"]
    heights = [max(4.2, 0.16 * n_rows + 2.5) if p == "roof" else max(2.2, 0.28 * len(membound) + 1.0) for p in panels]
    fig = plt.figure(figsize=(10.5, sum(heights) + 0.4), dpi=110)
    grid = fig.add_gridspec(len(panels), 2, width_ratios=[1.35, 1], height_ratios=heights)
    for k, p in enumerate(panels):
        if p == "roof":
            ax = fig.add_subplot(grid[k, 0])
            roofline(ax, flops, measured, datasheet, roofs=roofs, table_ax=fig.add_subplot(grid[k, 1]),
                     title="Roofline" + (f": {title}" if title else ""))
        else:
            ax = fig.add_subplot(grid[k, :])
            bandwidth(ax, membound, title="Bandwidth" + (f": {title}" if title else ""))
    fig.tight_layout()
    return fig


def plot(points: Iterable = (), measured: dict | None = None, datasheet: dict | None = None, *,
         title: str | None = None, ax=None, roofs=None):
    """The roofline alone on one Axes (the chapter 01 control draws on it); returns the Axes."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    return roofline(ax, points, measured, datasheet, roofs=roofs, title=title)
