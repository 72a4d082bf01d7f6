"""The course's one Roofline plot: log-log, measured roofs solid, datasheet roofs dashed, ridge marked."""
from __future__ import annotations

import math
from typing import Iterable

from .ceilings import ridge_point

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
          "#7f7f7f", "#bcbd22"]
MARKERS = "osD^vP*Xhp"


def _point(p) -> dict:
    """A kernel point from a Record or a dict(label, intensity, tflops)."""
    if hasattr(p, "intensity"):
        return {"label": f"{p.op}: {p.kernel}", "intensity": p.intensity, "tflops": p.tflops,
                "shape": p.shape_key}
    return p


def _labelled(points) -> list[dict]:
    """Points with unique labels: a kernel measured at several shapes gets its shape in the label."""
    pts = [dict(_point(p)) for p in points]
    seen = [q["label"] for q in pts]
    for q in pts:
        if seen.count(q["label"]) > 1 and q.get("shape"):
            q["label"] = f"{q['label']} @ {q['shape']}"
    return pts


def roof(intensity: float, bandwidth_gbps: float, peak_tflops: float) -> float:
    """Attainable TFLOP/s at an arithmetic intensity (FLOP/byte)."""
    return min(peak_tflops, intensity * bandwidth_gbps * 1e9 / 1e12)


def plot(points: Iterable = (), measured: dict | None = None, datasheet: dict | None = None, *,
         title: str | None = None, ax=None, xlim=(1 / 64, 4096), compute="bf16"):
    """Draw the roofline. `measured` has copy_gbps, fp32_tflops, bf16_tflops (from labkit.ceilings);
    `datasheet` a row of ceilings.DATASHEET. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    pts = [q for q in _labelled(points)
           if q["tflops"] > 0 and math.isfinite(q["intensity"]) and q["intensity"] > 0]  # copies: no FLOPs
    if pts:  # widen the axis to show every point (a large GEMM or attention sits far right)
        xlim = (min(xlim[0], min(q["intensity"] for q in pts) / 2), max(xlim[1], max(q["intensity"] for q in pts) * 2))
    xs = [xlim[0] * (xlim[1] / xlim[0]) ** (i / 200) for i in range(201)]

    def draw(bw, peaks, style, who):
        for name, peak, color in peaks:
            if not peak:
                continue
            ax.plot(xs, [roof(x, bw, peak) for x in xs], style, color=color, lw=1.8 if style == "-" else 1.2,
                    label=f"{who} {name}: {peak:.0f} TFLOP/s, {bw:.0f} GB/s" if name == "bf16" or peak
                    else None)
        if peaks and peaks[0][1]:
            r = ridge_point(peaks[0][1], bw)
            ax.plot([r], [peaks[0][1]], "o", mfc="white", mec="black" if style == "-" else "gray", ms=7, zorder=5)
            ax.annotate(f"ridge {r:.0f} FLOP/B", (r, peaks[0][1]), textcoords="offset points", xytext=(6, -14) if style == "-" else (-30, 8),
                        fontsize=8, color="black" if style == "-" else "gray")

    if datasheet:
        draw(datasheet["bandwidth_gbps"], [("bf16", datasheet["bf16_tflops"], "#999999"),
                                          ("fp32", datasheet["fp32_tflops"], "#bbbbbb")], "--", "datasheet")
    if measured:
        draw(measured["copy_gbps"], [("bf16", measured.get("bf16_tflops"), "#222222"),
                                    ("fp32", measured.get("fp32_tflops"), "#666666")], "-", "measured")

    palette = COLORS if len(pts) <= len(COLORS) else [plt.cm.tab20(i % 20) for i in range(len(pts))]
    for i, p in enumerate(pts):
        ax.plot([p["intensity"]], [p["tflops"]], MARKERS[i % len(MARKERS)], color=palette[i], ms=7,
                label=p["label"], zorder=6)

    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=10)
    ax.set_xlim(*xlim)
    ymax = max([measured.get("bf16_tflops") or 0 for measured in [measured or {}]] +
               [datasheet["bf16_tflops"] if datasheet else 0] + [1.0])
    ax.set_ylim(min(0.05, _ymin(points)), ymax * 2)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
    ax.set_ylabel("attained TFLOP/s")
    ax.grid(True, which="major", ls=":", lw=0.6)
    if title:
        ax.set_title(title, fontsize=11)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
    return ax


def _ymin(points) -> float:
    vals = [_point(p)["tflops"] for p in points if math.isfinite(_point(p)["intensity"])]
    vals = [v for v in vals if v > 0]
    return 10 ** math.floor(math.log10(min(vals))) if vals else 0.01
