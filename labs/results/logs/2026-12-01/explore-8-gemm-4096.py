"""Chapter 07 at 4096^3 on the H200: the persistent (05) and ping-pong (08) rungs' tile order, ring depth and
tile shape, each variant checked first in a child process (a deadlock ends it with a message), then all timed
in one bench_interleaved group with cuBLAS (one L2 flush before each repetition, in alternation), then the
best three again at 8192^3 beside cuBLAS and the defaults.

    python3 labs/results/logs/2026-12-01/explore-8-gemm-4096.py

Why: at 4096^3 the records put 05 at 0.87x and 08 at 0.88x the cuBLAS record (0.91x the cuBLAS timed beside
each), at 8192^3 both at 0.97x. 512 tiles of 128 x 256 (or 1024 of 128 x 128 for two consumers) on 132 SMs
is 3.88 waves; the variants test whether the order of tiles in L2 (GROUP_M), the ring depth, or the tile
shape moves the 4096^3 figure.
"""
import subprocess
import sys
import time
from pathlib import Path

T0 = time.time()
ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
CHILD_TIMEOUT_S = 90
VARIANTS = {
    "persistent": ((), (("GROUP_M", 4),), (("GROUP_M", 16),), (("STAGES", 3),), (("BN", 128), ("STAGES", 6))),
    "pingpong": ((), (("STAGES", 4),), (("STAGES", 5),), (("GROUP_M", 4),), (("GROUP_M", 16),),
                 (("BM", 64), ("BN", 256), ("STAGES", 5)), (("BM", 64), ("BN", 256), ("STAGES", 4))),
}


def say(*a):
    print(f"[{time.time() - T0:5.1f}s]", *a, flush=True)


def rungs():
    from labkit.chapters import ch07
    out = []
    for base, vs in VARIANTS.items():
        r = ch07.rungs()[base]
        for v in vs:
            name = base + ("[" + ",".join(f"{k}={x}" for k, x in v) + "]" if v else "")
            out.append(ch07.Rung(name, r.path, r.function, tuple(v)))
    return out


def child() -> int:
    from labkit.chapters import ch07
    from labkit.errors import CheckFailed, KernelInputError
    from labkit.measure.context import Context
    ch07.require_hopper()
    ctx = Context({}, {"sm_count": 0})
    bad = 0
    for r in rungs():
        for (M, N, K), cap in (((333, 264, 200), None), ch07.FEW_BLOCKS):
            what = f"{r.name} {M}x{N}x{K}" + (f" ({cap} blocks)" if cap else "")
            say(f"  checking {what} ...")
            try:
                ch07.check_rung(ctx, r, M, N, K, grid_cap=cap, what=what)
            except (CheckFailed, KernelInputError) as e:
                bad += 1
                say(f"  FAIL {str(e)[:300]}")
    say(f"child: {bad} failures")
    return 1 if bad else 0


def main() -> int:
    say(f"step 1: checks in a child process (timeout {CHILD_TIMEOUT_S} s)")
    try:
        rc = subprocess.run([sys.executable, __file__, "--child"], cwd=str(ROOT), timeout=CHILD_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        say("a check did not finish: the last 'checking' line names it; nothing timed")
        return 2
    if rc:
        say(f"the child failed (rc={rc}): nothing timed")
        return rc
    import cupy as cp
    from labkit.chapters import ch07
    from labkit.chapters.ch06 import random_bf16
    from labkit.measure.timing import bench_interleaved
    rows = []

    def timed(M, N, K, rs, reps):
        A, B_t = random_bf16((M, K)), random_bf16((N, K))
        C = cp.empty((M, N), dtype=cp.uint16)
        fns = {"cuBLAS": lambda: ch07.cublas_bf16(A, B_t, C)}
        for r in rs:
            fns[r.name] = ch07.launcher(A, B_t, C, rung=r)
        t = bench_interleaved(fns, max_reps=reps)
        base = t["cuBLAS"].median_ms
        out = []
        for name, tm in t.items():
            tf = 2 * M * N * K / (tm.median_ms * 1e-3) / 1e12
            say(f"  {M}x{N}x{K} {name:42s} {tm.median_ms:8.4f} ms (IQR {tm.spread_ms:.4f}) {tf:6.1f} TFLOP/s "
                f"{base / tm.median_ms:5.3f}x cuBLAS")
            rows.append((f"{M}x{N}x{K}", name, tm.median_ms, tf, base / tm.median_ms))
            out.append((base / tm.median_ms, name))
        del A, B_t, C
        cp.get_default_memory_pool().free_all_blocks()
        return out

    say("step 2: every variant at 4096^3, interleaved with cuBLAS")
    res = timed(4096, 4096, 4096, rungs(), 60)
    best = [n for _, n in sorted(res, reverse=True) if n != "cuBLAS"][:3]
    keep = [r for r in rungs() if r.name in best or r.name in VARIANTS]
    if time.time() - T0 < 120:
        say("step 3: the best three and the defaults at 8192^3")
        timed(8192, 8192, 8192, keep, 20)
    print("\n== summary ==")
    for shape, name, ms, tf, x in rows:
        print(f"{shape:16s} {name:42s} {ms:8.4f} ms {tf:6.1f} TFLOP/s {x:5.3f}x")
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(child() if "--child" in sys.argv else main())
