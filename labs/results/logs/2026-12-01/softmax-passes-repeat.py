"""Chapter 04's online softmax against its three-pass kernel, five times over with fresh inputs: the spread of
the gain that one recording cannot show (single recordings have put it anywhere from 0.7% to 8.5%).

Run on a GPU machine from the repository root (labkit, cupy; torch optional):

    python3 labs/results/logs/2026-12-01/softmax-passes-repeat.py [OUTDIR]      # about 30 s

Each run: fresh bf16 rows (65536 x 4096 and 16384 x 32768, the chapter's shapes), the three kernels and
torch.softmax timed in alternation (bench_interleaved: each repetition after its own L2 flush), the outputs
checked against an fp64 reference on two rows first. Prints per run the medians and online's gain over
three_pass, then the median, min and max of the gain over the runs; writes OUTDIR/softmax-passes-repeat.json.
"""
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

from labkit.chapters import ch04  # noqa: E402
from labkit.measure import bf16  # noqa: E402
from labkit.measure.timing import bench_interleaved  # noqa: E402

SHAPES = [(65536, 4096), (16384, 32768)]
RUNS = 5


def check(y, x, rows=(0, -1)):
    for r in rows:
        xr = bf16.from_bits(x[r]).get().astype(np.float64)
        e = np.exp(xr - xr.max())
        ref = e / e.sum()
        got = bf16.from_bits(y[r]).get().astype(np.float64)
        if not np.all(np.abs(got - ref) <= 2 ** -8 * np.abs(ref) + 1e-12):
            raise SystemExit(f"softmax wrong on row {r}")


def main(outdir: Path):
    out = {"runs": []}
    try:
        import torch
    except ImportError:
        torch = None
    for M, N in SHAPES:
        gains = []
        for run in range(RUNS):
            x = bf16.to_bits(cp.random.default_rng(100 + run).standard_normal((M, N), dtype=cp.float32) * 3)
            ys = {v: cp.empty_like(x) for v in ch04.SOFTMAX_VERSIONS}
            fns = {v: (lambda v=v: ch04.softmax(x, ys[v], v)) for v in ch04.SOFTMAX_VERSIONS}
            for v, fn in fns.items():
                fn()
                check(ys[v], x)
            if torch is not None:
                xt = bf16.as_torch(x)
                fns["torch"] = lambda xt=xt: torch.softmax(xt, dim=-1)
            ts = bench_interleaved(fns, max_reps=30)
            gain = ts["three_pass"].median_ms / ts["online"].median_ms
            gains.append(gain)
            row = {"shape": [M, N], "run": run, **{k: t.median_ms for k, t in ts.items()}, "online_gain": gain}
            out["runs"].append(row)
            print(f"{M}x{N} run {run}: " + "  ".join(f"{k} {t.median_ms:.4f} ms" for k, t in ts.items())
                  + f"  online / three_pass: {100 * (gain - 1):+.1f}%")
            del x, ys, fns
            cp.get_default_memory_pool().free_all_blocks()
        out[f"{M}x{N}"] = {"median_gain": statistics.median(gains), "min_gain": min(gains), "max_gain": max(gains)}
        print(f"{M}x{N}: online's gain over three_pass, median {100 * (statistics.median(gains) - 1):+.1f}%, "
              f"range {100 * (min(gains) - 1):+.1f}% to {100 * (max(gains) - 1):+.1f}% over {RUNS} runs")
        (outdir / "softmax-passes-repeat.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", ".")))
