"""Chapter 10's fused cross-entropy: what closes the gap to a copy? Two questions, one run each:

    prefetch  keeping the next batch's loads in flight while the SFU works on the current one (-DPREFETCH=K)
    hints     L2 eviction hints (-DHINTS=1): keep the row for its second read, stream the gradient through

Every build is checked on the irregular cases, out of place and in place, then timed beside a copy of the
same bytes and rung 1 (CUDA events, L2 flushed, bench_interleaved), at one block of 1024 threads per SM and
two of 512. Run on a GPU machine from the repository root:

    python3 labs/results/logs/2026-12-01/cross-entropy-prefetch.py OUTDIR [prefetch|hints]   # ~30 s each

Writes OUTDIR/cross-entropy-<question>.json and prints one line per shape and build.
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

import cupy as cp  # noqa: E402

from labkit.chapters import ch10  # noqa: E402
from labkit.measure.device import gpu_info  # noqa: E402
from labkit.measure.timing import bench_interleaved  # noqa: E402

BUILDS = {"prefetch": {f"P{p}": (f"-DPREFETCH={p}",) for p in (0, 1, 2, 4)},
          "hints": {"P0": ("-DPREFETCH=0",), "P2": ("-DPREFETCH=2",), "P1 H1": ("-DPREFETCH=1", "-DHINTS=1"),
                    "P2 H1": ("-DPREFETCH=2", "-DHINTS=1")}}
GRIDS = [(1024, 1), (512, 2)]          # (THREADS, blocks per SM)


def main(outdir: Path, question: str):
    builds = BUILDS[question]
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    out = {"gpu": gpu_info(), "rows": [], "checked": 0}
    for b, defines in builds.items():
        for threads, _ in GRIDS:
            for i, (N, V, ign) in enumerate(ch10.CHECK_CASES):
                for in_place in (False, True):
                    probs = ch10.check_case("fused", N, V, ign, 90 + i, in_place=in_place, threads=threads,
                                            blocks=3, defines=defines)
                    if probs:
                        print(f"FAIL {b} THREADS={threads} {N}x{V} in_place={in_place}: {probs}")
                        sys.exit(1)
                    out["checked"] += 1
    print(f"checks ok: {out['checked']}")
    for N, V in ch10.SHAPES:
        x = ch10.random_logits(N, V, 5)
        t = cp.asarray(ch10.random_targets(N, V, N // 64, 6))
        n = ch10.check_targets(t, V)
        g, loss, lse, mean = cp.empty_like(x), cp.empty(N, cp.float32), cp.empty(N, cp.float32), cp.empty(1, cp.float32)
        nbytes = ch10.ce_bytes(N, V)
        src, dst = cp.empty(nbytes // 2, cp.uint8), cp.empty(nbytes // 2, cp.uint8)
        fns = {"copy": lambda d=dst, s=src: cp.copyto(d, s),
               "two_pass": ch10.launcher(x, t, g, loss, lse, mean, version="two_pass", scale=1 / n)}
        for b, defines in builds.items():
            for threads, bps in GRIDS:
                fns[f"{b} T{threads} x{bps}"] = ch10.launcher(x, t, g, loss, lse, mean, version="fused", scale=1 / n,
                                                             threads=threads, blocks=bps * sms, defines=defines)
        ts = bench_interleaved(fns, max_reps=20)
        copy_ms = ts["copy"].median_ms
        for name, tm in ts.items():
            row = {"shape": [N, V], "build": name, "ms": tm.median_ms, "pct_of_copy": 100 * copy_ms / tm.median_ms}
            out["rows"].append(row)
            print(f"{N:6d}x{V:<7d} {name:16s} {tm.median_ms:8.4f} ms {row['pct_of_copy']:6.1f}% of copy")
        del x, g, src, dst, fns
        cp.get_default_memory_pool().free_all_blocks()
        (outdir / f"cross-entropy-{question}.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", ".")),
         sys.argv[2] if len(sys.argv) > 2 else "prefetch")
