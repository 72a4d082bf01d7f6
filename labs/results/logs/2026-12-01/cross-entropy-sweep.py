"""Chapter 10's capstone on one GPU: both rungs checked, then the fused kernel's builds and grids timed
beside a copy of the same bytes, to choose its defaults (threads per block, blocks per SM) per row length.

Run on a GPU machine from the repository root (labkit, cupy; torch optional):

    python3 labs/results/logs/2026-12-01/cross-entropy-sweep.py [OUTDIR]     # about a minute

Writes OUTDIR/cross-entropy-sweep.json (default $OUT, else the current directory) and prints a table: for each
shape (4096 x 128256, 16384 x 32000) and each (THREADS, blocks per SM), the median time (CUDA events, L2
flushed, bench_interleaved beside the copy and rung 1), GB/s of the floor's bytes (logits read once,
gradient written once), % of the copy, and the rows in flight in MB against the L2.
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import cupy as cp  # noqa: E402

from labkit.chapters import ch10  # noqa: E402
from labkit.measure.compile import kernel  # noqa: E402
from labkit.measure.device import gpu_info  # noqa: E402
from labkit.measure.timing import bench_interleaved  # noqa: E402

BUILDS = [(1024, 1), (512, 1), (512, 2), (256, 1), (256, 2), (256, 4)]     # (THREADS, blocks per SM)


def resident(threads: int) -> int:
    """Blocks of the fused kernel's THREADS build that fit on one SM (the driver's occupancy calculator)."""
    k = kernel(ch10.FUSED, "ce_fused", (f"-DTHREADS={threads}",))
    return cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(k.kernel.ptr, threads, 0)


def main(outdir: Path):
    dev = cp.cuda.Device()
    sms, l2 = dev.attributes["MultiProcessorCount"], dev.attributes["L2CacheSize"]
    out = {"gpu": gpu_info(), "sms": sms, "l2_bytes": l2, "checks": [], "rows": []}
    for threads, _ in BUILDS:                      # every build checked on the irregular cases first
        for i, (N, V, ign) in enumerate(ch10.CHECK_CASES):
            p = ch10.check_case("fused", N, V, ign, 70 + i, threads=threads, blocks=3)
            out["checks"].append({"threads": threads, "case": [N, V, ign], "problems": p})
            if p:
                print(f"FAIL fused THREADS={threads} {N}x{V}: {p}")
                sys.exit(1)
    print(f"checks ok: {len(out['checks'])}")
    for N, V in ch10.SHAPES:
        x = ch10.random_logits(N, V, 5)
        t_host = ch10.random_targets(N, V, N // 64, 6)
        t = cp.asarray(t_host)
        n = ch10.check_targets(t, V)
        g, loss, lse, mean = cp.empty_like(x), cp.empty(N, cp.float32), cp.empty(N, cp.float32), cp.empty(1, cp.float32)
        nbytes = ch10.ce_bytes(N, V)
        src, dst = cp.empty(nbytes // 2, cp.uint8), cp.empty(nbytes // 2, cp.uint8)
        fns = {"copy": lambda d=dst, s=src: cp.copyto(d, s),
               "two_pass": ch10.launcher(x, t, g, loss, lse, mean, version="two_pass", scale=1 / n)}
        for threads, bps in BUILDS:
            fns[f"fused T{threads} x{bps}"] = ch10.launcher(x, t, g, loss, lse, mean, version="fused", scale=1 / n,
                                                           threads=threads, blocks=bps * sms)
        ts = bench_interleaved(fns, max_reps=20)
        copy_ms = ts["copy"].median_ms
        for name, tm in ts.items():
            bps = None
            if name.startswith("fused"):
                threads = int(name.split()[1][1:])
                bps = min(int(name.split("x")[-1]), resident(threads))      # the blocks that run at once
            row = {"shape": [N, V], "kernel": name, "ms": tm.median_ms, "gbps": nbytes / (tm.median_ms * 1e-3) / 1e9,
                   "pct_of_copy": 100 * copy_ms / tm.median_ms,
                   "rows_in_flight_mb": (bps * sms * V * 2 / 1e6) if bps else None}
            out["rows"].append(row)
            print(f"{N:6d}x{V:<7d} {name:18s} {tm.median_ms:8.4f} ms {row['gbps']:6.0f} GB/s {row['pct_of_copy']:6.1f}%"
                  + (f"  rows in flight {row['rows_in_flight_mb']:5.1f} MB of {l2 / 1e6:.0f}" if bps else ""))
        del x, g, src, dst, fns
        cp.get_default_memory_pool().free_all_blocks()
        (outdir / "cross-entropy-sweep.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", ".")))
