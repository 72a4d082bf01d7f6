"""Chapter 07, rung 8 (08_pingpong.cu, ping-pong consumers) on the H200: correctness first, in a child
process, then 05 (persistent, cooperative) and 08 timed against cuBLAS, interleaved.

Run from the repository root on a Hopper GPU (cupy, numpy, torch; labkit from this checkout):

    python3 labs/results/logs/2026-12-01/explore-7-pingpong.py

Steps:
 1. a child process (this file with --child) makes the first launches of 08: ch07.check_rung against float64
    on the chapter's CHECK_SHAPES (tails in M, N, K, one row, many tiles per block) and on an 8-block
    persistent grid (FEW_BLOCKS: 2600 x 4360 x 328, ~92 tiles a block, 46 per consumer, KT = 6 = STAGES, so
    every tile's ring position starts mid-ring), then the variants BM=64 BN=256, STAGES=4, STAGES=7,
    IN_FLIGHT=0 on 333 x 264 x 200 and FEW_BLOCKS. The child is given CHILD_TIMEOUT_S: a deadlock (a wrong
    parity or a lost hand-over) ends it with a message instead of hanging the run. Nothing is timed unless
    every check passed;
 2. at 4096^3, 8192^3 and 8192 x 28672 x 8192: cuBLAS, 05 and 08 through labkit.measure.timing.
    bench_interleaved (each repetition of each after its own L2 flush, in alternation, so clock drift
    under tensor load hits all three alike; cuBLAS is timed beside each); TFLOP/s, % of the 947 TFLOP/s
    wgmma roof and x cuBLAS; 08's output compared with cuBLAS's on the timed inputs;
 3. at 8192^3, the variants of 08 beside cuBLAS and 08, if time is left (global guard GUARD_S).
"""
import subprocess
import sys
import time
from pathlib import Path

T0 = time.time()
ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
CHILD_TIMEOUT_S = 60
GUARD_S = 85
WGMMA_ROOF = 947.0
PINGPONG = ("07-gemm-hopper/08_pingpong.cu", "gemm_pingpong")
VARIANTS = ((("BM", 64), ("BN", 256), ("STAGES", 5)), (("STAGES", 4),), (("STAGES", 7),), (("IN_FLIGHT", 0),))
SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 8192))


def say(*a):
    print(f"[{time.time() - T0:5.1f}s]", *a, flush=True)


def rung(macros=()):
    from labkit.chapters import ch07
    name = "pingpong" + ("[" + ",".join(f"{k}={v}" for k, v in macros) + "]" if macros else "")
    return ch07.Rung(name, *PINGPONG, tuple(macros))


def child() -> int:
    from labkit.chapters import ch07
    from labkit.errors import CheckFailed
    from labkit.measure.context import Context
    ch07.require_hopper()
    ctx = Context({}, {"sm_count": 0})
    cases = [(rung(), s, None) for s in ch07.CHECK_SHAPES] + [(rung(), *ch07.FEW_BLOCKS)]
    for v in VARIANTS:
        cases += [(rung(v), (333, 264, 200), None), (rung(v), *ch07.FEW_BLOCKS)]
    bad = 0
    for r, (M, N, K), cap in cases:
        what = f"{r.name} {M}x{N}x{K}" + (f" ({cap} blocks)" if cap else "")
        say(f"  checking {what} ...")
        try:
            ch07.check_rung(ctx, r, M, N, K, grid_cap=cap, what=what)
            say(f"  PASS {what}")
        except CheckFailed as e:
            bad += 1
            say(f"  FAIL {str(e)[:400]}")
    say(f"child: {len(cases) - bad} of {len(cases)} checks passed")
    return 1 if bad else 0


def tflops(M, N, K, ms):
    return 2 * M * N * K / (ms * 1e-3) / 1e12


def main() -> int:
    say(f"step 1: first launches of 08 in a child process (timeout {CHILD_TIMEOUT_S} s)")
    try:
        rc = subprocess.run([sys.executable, __file__, "--child"], cwd=str(ROOT), timeout=CHILD_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        say(f"08 did not finish within {CHILD_TIMEOUT_S} s: a deadlock (hand-over or ring parity), or a hung "
            "launch; the last 'checking' line above names the shape. Nothing timed.")
        return 2
    if rc:
        say(f"the child failed (rc={rc}): nothing timed")
        return rc

    import cupy as cp
    from labkit.chapters import ch07
    from labkit.chapters.ch06 import agree, random_bf16
    from labkit.measure.context import Context
    from labkit.measure.timing import bench_interleaved
    ctx = Context({}, {"sm_count": 0})
    say("step 2: cuBLAS, 05 persistent, 08 pingpong, interleaved")
    rows = []
    for M, N, K in SHAPES:
        if time.time() - T0 > GUARD_S - 15:
            say(f"  guard: {M}x{N}x{K} skipped")
            continue
        A, B_t = random_bf16((M, K)), random_bf16((N, K))
        C = cp.empty((M, N), dtype=cp.uint16)
        fns = {"cuBLAS": lambda: ch07.cublas_bf16(A, B_t, C),
               "05 persistent": ch07.launcher(A, B_t, C, "persistent"),
               "08 pingpong": ch07.launcher(A, B_t, C, "pingpong")}
        t = bench_interleaved(fns, max_reps=30 if M * N * K > 1 << 40 else 50)
        base = t["cuBLAS"].median_ms
        for name, tm in t.items():
            tf = tflops(M, N, K, tm.median_ms)
            say(f"  {M}x{N}x{K} {name:16s} {tm.median_ms:8.4f} ms (IQR {tm.spread_ms:.4f}, n={tm.reps}) "
                f"{tf:6.1f} TFLOP/s {100 * tf / WGMMA_ROOF:5.1f}% of wgmma {base / tm.median_ms:5.3f}x cuBLAS")
            rows.append((f"{M}x{N}x{K}", name, tm.median_ms, tf, base / tm.median_ms))
        ref = cp.empty_like(C)
        ch07.cublas_bf16(A, B_t, ref)
        ch07.gemm(A, B_t, C, "pingpong")
        agree(ctx, C, ref, f"08 pingpong vs cuBLAS {M}x{N}x{K} (the timed inputs)")
        say(f"  {ctx.log[-1]}")
        del A, B_t, C, ref, fns
        cp.get_default_memory_pool().free_all_blocks()

    M = N = K = 8192
    if time.time() - T0 < GUARD_S - 20:
        say("step 3: variants of 08 at 8192^3, interleaved with cuBLAS and 08")
        A, B_t = random_bf16((M, K)), random_bf16((N, K))
        C = cp.empty((M, N), dtype=cp.uint16)
        fns = {"cuBLAS": lambda: ch07.cublas_bf16(A, B_t, C), "08 pingpong": ch07.launcher(A, B_t, C, "pingpong")}
        for v in VARIANTS:
            r = rung(v)
            fns[r.name] = ch07.launcher(A, B_t, C, rung=r)
        t = bench_interleaved(fns, max_reps=20)
        base = t["cuBLAS"].median_ms
        for name, tm in t.items():
            tf = tflops(M, N, K, tm.median_ms)
            say(f"  {name:32s} {tm.median_ms:8.4f} ms {tf:6.1f} TFLOP/s {base / tm.median_ms:5.3f}x cuBLAS")
            rows.append(("8192x8192x8192 (variants)", name, tm.median_ms, tf, base / tm.median_ms))
    else:
        say("guard: variants skipped")

    print("\n== summary: TFLOP/s (x cuBLAS beside it) ==")
    for shape, name, ms, tf, x in rows:
        print(f"{shape:28s} {name:32s} {ms:8.4f} ms {tf:6.1f} TFLOP/s {x:5.3f}x")
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(child() if "--child" in sys.argv else main())
