"""Chapter 05 kernel ladder (fp32 SGEMM on CUDA cores: naive -> coalesced -> shared-memory tiles -> 1-D and
2-D register blocking -> float4 + transposed A -> warp tiles -> double buffering) on one GPU: check, time
against cuBLAS fp32 (TF32 off) and the fp32 FMA roof, and sweep the last rung's tile parameters.

Run from anywhere on a GPU machine (cupy, numpy, torch; labkit is not used):

    python3 labs/results/logs/2026-12-01/sgemm-ladder-sweep.py [OUTDIR]
    python3 labs/results/logs/2026-12-01/sgemm-ladder-sweep.py --cpu-check     # no GPU: compile report only

OUTDIR defaults to $OUTDIR, else $OUT, else the current directory. Results go to OUTDIR/sgemm-ladder.json,
rewritten after every phase (a run cut short still leaves what it measured); a compact table is printed last.

C[M, N] = A[M, K] @ B[K, N], fp32, row-major, leading dimensions K, N, N. Steps:
 1. every rung of kernels/05-gemm-simt/ is compiled with cupy.RawModule(options=("-std=c++17", "-arch=sm_XY"
    of this GPU, -D macros)) and first launched in a spawned child process, never in this one (a fault
    ends the child; a fresh child takes the rest; a child silent for 45 s is killed). Shapes (1,1,1),
    (17,19,23), (127,129,131), (128,128,128), (257,255,64), (4096,64,512), (64,64,8191), (1000,1000,1000),
    (130,132,64) and (128,128,128) with A misaligned by one float (the scalar fallback of the float4
    kernels). Output NaN-poisoned, 4096 canary floats after it; errors against a float64 numpy reference:
    max_ij |c - ref| / S_ij with S = |A| @ |B| (the scale of a dot product's rounding error: fp32 sums grow
    like sqrt(K) eps of it) must be <= 1e-5, and ||c - ref||_F / ||ref||_F <= 1e-5.
    Meanwhile spawned worker processes compile the sweep variants to cubins with NVRTC (ptxas reports kept);
 2. the sweep variants are checked in a child on (257,255,64), (256,384,128), (130,132,64);
 3. every rung that passed is timed at 4096^3 (01 and 02 at 2048^3 with 20 runs and at 4096^3 with 5) and
    at M=8192, N=1024, K=4096 (rungs 05-08), against cuBLAS (torch.matmul on the same data through DLPack,
    TF32 off, timed before and after the ladder; the faster median is the baseline): CUDA events, warm-up,
    the L2 flushed before every run by READING a buffer twice its size, median and IQR of 20 runs. Each
    timed output is compared with cuBLAS's (max |c - c_cublas| / S <= 1e-5, canary intact, no NaN);
 4. a sweep of version 8's macros (BM, BN, BK, WM, WN, WNITER, TM, TN, MINB) at 4096^3, 10 runs each,
    skipping variants that do not fit (smem > 227 KB, threads > 1024, ptxas spills, failed checks), with
    a progress line per variant and a 150 s guard (compile included); the fastest passing variant is the
    tuned rung: checked on every shape in a child, timed again at 4096^3 (30 runs) and at 8192x1024x4096.
A global guard of 225 s trims what is left. SGEMM05_KDIR overrides the kernel folder; SGEMM05_SMOKE=1 shrinks the
timing shapes (a CPU smoke test of the script's own logic against stand-in cupy/torch modules).
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import math
import multiprocessing as mp
import os
import pathlib
import queue
import re
import sys
import tempfile
import time
import traceback

T0 = time.time()
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[3]
KDIR = pathlib.Path(os.environ.get("SGEMM05_KDIR", ROOT / "kernels" / "05-gemm-simt"))

GLOBAL_GUARD_S = 225.0
SWEEP_GUARD_S = 150.0       # the sweep's compile + check + timing, counted from the start of its compiles
CHILD_STALL_S = 45.0
RUNS, SWEEP_RUNS, TUNED_RUNS, SLOW_RUNS, WARMUP = 20, 10, 30, 5, 2
CANARY = 4096
TOL_ELEM, TOL_FRO = 1e-5, 1e-5
FMA_ROOF_TFLOPS = 65.0      # chapter 01's FMA probe on the H200 (65.2 measured; datasheet 66.9)
CHECK_SHAPES = [(1, 1, 1), (17, 19, 23), (127, 129, 131), (128, 128, 128), (257, 255, 64), (4096, 64, 512),
                (64, 64, 8191), (1000, 1000, 1000), (130, 132, 64), (128, 128, 128, "misaligned A")]
SWEEP_CHECK_SHAPES = [(257, 255, 64), (256, 384, 128), (130, 132, 64)]
BIG = (4096, 4096, 4096)
MID = (2048, 2048, 2048)
RECT = (8192, 1024, 4096)
if os.environ.get("SGEMM05_SMOKE"):     # CPU smoke test of this script's logic against stand-in modules
    BIG, MID, RECT = (256, 256, 256), (128, 128, 128), (512, 128, 256)

# name, file, entry point, -D overrides. Geometry (grid, block, dynamic smem) follows from the file's macros.
RUNGS = [
    ("01_naive", "01_naive.cu", "sgemm_naive", {}),
    ("02_coalesced", "02_coalesced.cu", "sgemm_coalesced", {}),
    ("03_smem_tiles", "03_smem_tiles.cu", "sgemm_smem_tiles", {}),
    ("04_blocktile_1d", "04_blocktile_1d.cu", "sgemm_blocktile_1d", {}),
    ("05_blocktile_2d", "05_blocktile_2d.cu", "sgemm_blocktile_2d", {}),
    ("06_vectorized", "06_vectorized.cu", "sgemm_vectorized", {}),
    ("06_vectorized[TRANSPOSE_A=0]", "06_vectorized.cu", "sgemm_vectorized", {"TRANSPOSE_A": 0}),
    ("06_vectorized[APAD=0]", "06_vectorized.cu", "sgemm_vectorized", {"APAD": 0}),
    ("07_warptile", "07_warptile.cu", "sgemm_warptile", {}),
    ("08_double_buffer", "08_double_buffer.cu", "sgemm_double_buffer", {}),
]
SLOW = {"01_naive", "02_coalesced"}            # timed at 2048^3 (20 runs) and 4096^3 (5 runs)
RECT_RUNGS = {"05_blocktile_2d", "06_vectorized", "07_warptile", "08_double_buffer"}
SWEEP_KEYS = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "MINB", "APAD")


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def smi():
    """The SM clock, power and temperature now (nvidia-smi), or why not: a full FMA load may lower the clock."""
    import subprocess
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or r.stderr.strip()[:200]
    except Exception as e:
        return repr(e)[:200]


# ----------------------------------------------------------------------------------------------------------
# Kernel sources, macros and launch geometry (no GPU needed)

def macro_defaults(src):
    """The file's tunables: `#ifndef NAME / #define NAME value` pairs and plain `#define NAME <int>`."""
    d = {}
    for m in re.finditer(r"^#define\s+(\w+)\s+(-?\d+)\b", src, re.M):
        d[m.group(1)] = int(m.group(2))
    return d


def geometry(file, macros):
    """(BM, BN, block tuple, dynamic shared memory bytes) of one rung with these macro values."""
    g = macros
    if file in ("01_naive.cu", "02_coalesced.cu"):
        return g["BLOCK"], g["BLOCK"], (g["BLOCK"], g["BLOCK"], 1), 0
    if file == "03_smem_tiles.cu":
        return g["TILE"], g["TILE"], (g["TILE"], g["TILE"], 1), 0
    if file == "04_blocktile_1d.cu":
        return g["BM"], g["BN"], (g["BM"] * g["BN"] // g["TM"], 1, 1), 0
    if file in ("05_blocktile_2d.cu", "06_vectorized.cu"):
        return g["BM"], g["BN"], ((g["BM"] // g["TM"]) * (g["BN"] // g["TN"]), 1, 1), 0
    nt = (g["BM"] // g["WM"]) * (g["BN"] // g["WN"]) * 32
    smem = 2 * g["BK"] * (g["BM"] + g["APAD"] + g["BN"]) * 4 if file == "08_double_buffer.cu" else 0
    return g["BM"], g["BN"], (nt, 1, 1), smem


def check_v8(c):
    """None if version 8 compiles and fits with these macros, else why not (mirrors its static_asserts)."""
    BM, BN, BK, WM, WN, WNITER, TM, TN, MINB, APAD = (c[k] for k in SWEEP_KEYS)
    if BM % WM or BN % WN:
        return "warp tiles do not tile the block"
    nt = (BM // WM) * (BN // WN) * 32
    if nt > 1024:
        return f"{nt} threads > 1024"
    if (WM * WN) % (32 * TM * TN * WNITER):
        return "32 lanes do not cover the warp tile"
    wmiter = WM * WN // (32 * TM * TN * WNITER)
    if wmiter < 1 or WM % wmiter or WN % WNITER:
        return "sub-tiles do not tile the warp tile"
    wsm, wsn = WM // wmiter, WN // WNITER
    if wsm % TM or wsn % TN or (wsm // TM) * (wsn // TN) != 32:
        return "sub-tile is not 32 lanes"
    if TM % 4 or TN % 4 or BK % 4 or APAD % 4:
        return "float4 granularity"
    if (BM * BK // 4) % nt or (BK * BN // 4) % nt:
        return "slab does not split into whole float4 per thread"
    smem = 2 * BK * (BM + APAD + BN) * 4
    if smem > 227 * 1024:
        return f"smem {smem} B > 227 KB"
    if nt * MINB > 2048 or smem * MINB > 228 * 1024:
        return f"MINB={MINB} blocks of {nt} threads / {smem} B do not fit an SM"
    acc = wmiter * TM * WNITER * TN
    cap = min(255, 65536 // (nt * MINB))
    if acc + wmiter * TM + WNITER * TN + 8 > cap:
        return f"{acc} accumulators + operands exceed the {cap}-register cap"
    return None


def sweep_configs(base):
    """Version 8 variants, most promising first, at most 60 that pass check_v8."""
    out, seen = [], set()

    def add(BM, BN, BK, WM, WN, WNITER, TM, TN, MINB, APAD=4):
        c = dict(BM=BM, BN=BN, BK=BK, WM=WM, WN=WN, WNITER=WNITER, TM=TM, TN=TN, MINB=MINB, APAD=APAD)
        key = tuple(c[k] for k in SWEEP_KEYS)
        if key not in seen and check_v8(c) is None:
            seen.add(key)
            out.append(c)

    add(*(base[k] for k in SWEEP_KEYS[:-1]), APAD=base["APAD"])          # the file's defaults first
    # A. 128 x 128 tiles, 8 warps, 8 x 8 results per thread: warp shape, sub-tiling, BK, registers
    #    (under MINB = 2, a 128-register cap, NVRTC 13.5's ptxas spilled: two of those kept as a record)
    for MINB, BK in ((1, 8), (1, 16)):
        for WM, WN in ((32, 64), (64, 32)):
            for TM, TN, WNITER in ((4, 4, 2), (8, 4, 2), (4, 8, 1), (8, 8, 1)):
                add(128, 128, BK, WM, WN, WNITER, TM, TN, MINB)
    add(128, 128, 8, 32, 64, 2, 4, 4, 2)
    add(128, 128, 8, 64, 32, 2, 4, 4, 2)
    # B. 128 x 256 and 256 x 128 tiles, 8 warps, 8 x 16 / 16 x 8 per thread, one block per SM
    for BK in (8, 16):
        for BM, BN in ((128, 256), (256, 128)):
            add(BM, BN, BK, 64, 64, 4, 4, 4, 1)
            add(BM, BN, BK, 64, 64, 2, 4, 4, 1)
        add(128, 256, BK, 32, 128, 4, 4, 4, 1)
        add(256, 128, BK, 128, 32, 2, 4, 4, 1)
    # C. 4 warps: 64 x 128 / 128 x 64 with 8 x 8 per thread (3-4 blocks per SM), 128 x 128 with 8 x 16
    for BK in (8, 16):
        for MINB in ((4, 3) if BK == 8 else (3,)):        # BK = 16 at 4 blocks per SM spills
            add(64, 128, BK, 32, 64, 2, 4, 4, MINB)
            add(128, 64, BK, 64, 32, 2, 4, 4, MINB)
        add(128, 128, BK, 64, 64, 4, 4, 4, 2)
        add(128, 128, BK, 64, 64, 4, 8, 4, 2)
    # D. 16 warps: 256 x 128 / 128 x 256 with 8 x 8 per thread, one block per SM
    for BK in (8, 16):
        add(256, 128, BK, 64, 32, 2, 4, 4, 1)
        add(128, 256, BK, 32, 64, 2, 4, 4, 1)
    # E. deeper slabs and no padding for the likeliest shapes
    add(128, 128, 32, 32, 64, 2, 4, 4, 1)
    add(128, 128, 32, 64, 32, 2, 8, 4, 1)
    add(128, 128, 8, 32, 64, 2, 4, 4, 2, APAD=0)
    add(128, 128, 16, 32, 64, 2, 4, 4, 1, APAD=0)
    return out[:60]


def cfg_name(c):
    return "BM{BM} BN{BN} BK{BK} WM{WM} WN{WN} WNITER{WNITER} TM{TM} TN{TN} MINB{MINB} APAD{APAD}".format(**c)


def nvrtc_compile(src, arch, defs, name="k.cu", want_cubin=True):
    """NVRTC straight (no GPU): (ok, log, cubin bytes or None, seconds)."""
    from cupy.cuda import nvrtc
    t = time.time()
    prog = nvrtc.createProgram(src, name, [], [])
    opts = [f"-arch={arch}", "-std=c++17", "-Xptxas=-v", *[f"-D{k}={v}" for k, v in defs.items()]]
    if tuple(nvrtc.getVersion()) >= (12, 9):
        opts.append("--no-cache")       # NVRTC 12.9+ may serve a cached compile with an empty ptxas log
    ok = True
    try:
        nvrtc.compileProgram(prog, opts)
    except nvrtc.NVRTCError:
        ok = False
    logtxt = nvrtc.getProgramLog(prog)
    logtxt = logtxt.decode() if isinstance(logtxt, bytes) else logtxt
    cubin = nvrtc.getCUBIN(prog) if (ok and want_cubin) else None
    try:
        nvrtc.destroyProgram(prog)
    except Exception:
        pass
    return ok, logtxt.rstrip("\x00"), cubin, time.time() - t


def parse_ptxas(logtxt):
    r = {}
    m = re.search(r"Used (\d+) registers", logtxt)
    r["registers"] = int(m.group(1)) if m else None
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", logtxt)
    r["spill_stores"], r["spill_loads"] = (int(m.group(1)), int(m.group(2))) if m else (None, None)
    m = re.search(r"(\d+) bytes smem", logtxt)
    r["static_smem"] = int(m.group(1)) if m else 0
    return r


def cpu_check():
    """Compile every rung and every sweep variant for sm_80 and sm_90 with NVRTC; print the ptxas reports."""
    bad = 0
    for name, file, fn, defs in RUNGS:
        src = (KDIR / file).read_text()
        for arch in ("sm_80", "sm_90"):
            ok, lg, _, dt = nvrtc_compile(src, arch, defs, file, want_cubin=False)
            p = parse_ptxas(lg)
            mac = {**macro_defaults(src), **defs}
            bm, bn, block, smem = geometry(file, mac)
            spill = (p["spill_stores"] or 0) + (p["spill_loads"] or 0)
            bad += (not ok) or spill > 0
            print(f"{name:30s} {arch} ok={ok} regs={p['registers']} smem={p['static_smem']}+{smem} "
                  f"spills={p['spill_stores']}/{p['spill_loads']} block={block} tile={bm}x{bn} {dt:.2f}s")
            if not ok:
                print(lg)
    src8 = (KDIR / "08_double_buffer.cu").read_text()
    base = macro_defaults(src8)
    cfgs = sweep_configs(base)
    print(f"sweep: {len(cfgs)} variants")
    with cf.ProcessPoolExecutor(max(1, min(12, os.cpu_count() or 1)), mp_context=mp.get_context("spawn")) as ex:
        futs = [ex.submit(nvrtc_compile, src8, "sm_90", c, "08_double_buffer.cu", False) for c in cfgs]
        for c, f in zip(cfgs, futs):
            ok, lg, _, dt = f.result()
            p = parse_ptxas(lg)
            _, _, block, smem = geometry("08_double_buffer.cu", {**base, **c})
            spill = (p["spill_stores"] or 0) + (p["spill_loads"] or 0)
            print(f"  {cfg_name(c):60s} ok={ok} regs={p['registers']} spills={p['spill_stores']}/{p['spill_loads']}"
                  f" threads={block[0]} smem={smem} {dt:.2f}s{'  (SPILLS: skipped on the GPU)' if spill else ''}")
            bad += not ok
    print("cpu-check:", "all compile" if bad == 0 else f"{bad} problems")
    return bad


# ----------------------------------------------------------------------------------------------------------
# Checks in a child process (a kernel that faults kills only the child's CUDA context)

def errors(np, c, ref, S):
    """(max |c-ref|/S, rel. Frobenius error, NaN count) of an fp32 result against the float64 reference."""
    nan = int(np.isnan(c).sum())
    d = np.abs(c.astype(np.float64) - ref)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(S > 0, d / np.where(S > 0, S, 1.0), np.where(d > 0, np.inf, 0.0))
    max_rel = float(np.nanmax(rel)) if rel.size and not np.all(np.isnan(rel)) else float("nan")
    den = float(np.linalg.norm(ref))
    fro = float(np.linalg.norm(np.nan_to_num(d, nan=np.inf)) / den) if den > 0 else float(np.nanmax(d) if d.size else 0)
    return max_rel, fro, nan


def child_checks(items, q, arch):
    """items: [(index, item dict)]; an item names a source (or cubin), an entry point, macros and shapes."""
    try:
        import cupy as cp
        import numpy as np
    except Exception:
        q.put(("crash", None, traceback.format_exc()))
        return
    host = {}

    def shape_data(shape):
        key = tuple(shape)
        if key not in host:
            M, N, K = shape[:3]
            rng = np.random.default_rng(1000 + M * 7 + N * 13 + K * 17)
            A = rng.standard_normal((M, K), dtype=np.float32)
            B = rng.standard_normal((K, N), dtype=np.float32)
            A64, B64 = A.astype(np.float64), B.astype(np.float64)
            ref = A64 @ B64
            S = np.abs(A64) @ np.abs(B64)
            misaligned = len(shape) > 3
            dA = cp.empty(M * K + 1, dtype=cp.float32)
            dA = dA[1:] if misaligned else dA[:M * K]          # one float off: not 16-byte aligned
            dA[...] = cp.asarray(A.ravel())
            dB = cp.asarray(B.ravel())
            host[key] = (dA, dB, ref, S)
        return host[key]

    modules = {}
    for idx, it in items:
        q.put(("start", idx, None))
        res = {"checks": []}
        try:
            mkey = (it.get("cubin") or it["file"], tuple(sorted(it["defs"].items())))
            if mkey not in modules:
                if it.get("cubin"):
                    mod = cp.RawModule(path=it["cubin"])
                else:
                    opts = ("-std=c++17", f"-arch={arch}", *[f"-D{k}={v}" for k, v in it["defs"].items()])
                    mod = cp.RawModule(code=it["src"], options=opts)
                modules[mkey] = mod
            fn = modules[mkey].get_function(it["func"])
            if it["smem"] > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = it["smem"]
            res.update(registers=fn.num_regs, local_bytes=fn.local_size_bytes, max_threads=fn.max_threads_per_block)
            if fn.max_threads_per_block < it["block"][0] * it["block"][1]:
                raise RuntimeError(f"block {it['block']} exceeds the kernel's limit {fn.max_threads_per_block}")
        except Exception as e:
            res["error"] = f"compile/load: {type(e).__name__}: {str(e)[:2000]}"
            q.put(("done", idx, res))
            continue
        for shape in it["shapes"]:
            M, N, K = shape[:3]
            rec = {"shape": list(shape)}
            try:
                dA, dB, ref, S = shape_data(shape)
                cbuf = cp.empty(M * N + CANARY, dtype=cp.float32)
                cbuf[:M * N] = cp.nan
                pattern = cp.arange(CANARY, dtype=cp.float32) + 12345.0
                cbuf[M * N:] = pattern
                grid = ((N + it["bn"] - 1) // it["bn"], (M + it["bm"] - 1) // it["bm"], 1)
                fn(grid, tuple(it["block"]), (dA, dB, cbuf, np.int32(M), np.int32(N), np.int32(K)),
                   shared_mem=it["smem"])
                cp.cuda.runtime.deviceSynchronize()
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {str(e)[:500]}"
                res["checks"].append(rec)
                if "cuda" in type(e).__module__.lower() or "CUDA" in str(e):
                    res["fault"] = True
                    q.put(("done", idx, res))
                    q.put(("fault", idx, None))
                    return                   # this context is lost: the parent starts a fresh child
                continue
            c = cp.asnumpy(cbuf[:M * N]).reshape(M, N)
            canary_ok = bool(cp.all(cbuf[M * N:] == pattern))
            mx, fro, nan = errors(np, c, ref, S)
            rec.update(max_err_rel=mx, fro_err=fro, nan=nan, canary_ok=canary_ok,
                       ok=bool(nan == 0 and canary_ok and mx <= TOL_ELEM and fro <= TOL_FRO))
            res["checks"].append(rec)
        res["ok"] = all(r.get("ok") for r in res["checks"])
        q.put(("done", idx, res))
    q.put(("end", None, None))


def run_in_children(items, arch, deadline):
    """Run child_checks over items, a fresh spawned child after any fault; returns {index: result}."""
    results, pending = {}, list(range(len(items)))
    ctx = mp.get_context("spawn")
    while pending:
        if time.time() > deadline:
            for i in pending:
                results[i] = {"error": "skipped: time guard"}
            break
        q = ctx.Queue()
        p = ctx.Process(target=child_checks, args=([(i, items[i]) for i in pending], q, arch), daemon=True)
        p.start()
        inflight, last, started, heard = None, time.time(), False, False
        while True:
            try:
                kind, idx, payload = q.get(timeout=1.0)
            except queue.Empty:
                limit = CHILD_STALL_S if started else 120.0       # the first message waits for imports + CUDA init
                if not p.is_alive() or time.time() - last > limit or time.time() > deadline:
                    break
                continue
            last, heard = time.time(), True
            if kind == "start":
                inflight, started = idx, True
            elif kind == "done":
                results[idx] = payload
                if idx in pending:
                    pending.remove(idx)
                inflight = None
            elif kind == "crash":
                log("child crashed:", payload)
                for i in pending:
                    results[i] = {"error": "child crashed: " + str(payload)[-500:]}
                pending = []
                break
            elif kind in ("fault", "end"):
                break
        p.join(3)
        if p.is_alive():
            p.kill()
            p.join(5)
        if inflight is not None and inflight in pending:
            results[inflight] = {"error": "child died or stalled during this kernel (fault or hang)"}
            pending.remove(inflight)
            log(f"child lost at item {inflight}: {items[inflight]['name']}")
        elif not heard:                          # the child never got going: do not respawn it forever
            for i in pending:
                results[i] = {"error": f"child process did not start (exit code {p.exitcode})"}
            break
    return results


# ----------------------------------------------------------------------------------------------------------
# Timing in this process

class Timer:
    def __init__(self, cp):
        self.cp = cp
        l2 = cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
        self.flush_buf = cp.zeros(max(2 * l2, 1 << 24) // 4, dtype=cp.float32)
        self.flush_out = cp.zeros(1, dtype=cp.float32)
        self.flush_k = cp.RawKernel(r'''
extern "C" __global__ void l2_flush_read(const float4* __restrict__ x, long long n, float* out)
{
    float acc = 0.f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) out[0] = acc;      // never true for a zero buffer: keeps the reads alive
}''', "l2_flush_read")
        self.sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]

    def flush(self):
        self.flush_k((self.sms * 4,), (256,), (self.flush_buf, self.cp.int64(self.flush_buf.size // 4), self.flush_out))

    def bench(self, launch, reps, warmup=WARMUP):
        cp = self.cp
        for _ in range(warmup):
            launch()
        ev = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(reps)]
        for s, e in ev:
            self.flush()
            s.record()
            launch()
            e.record()
        ev[-1][1].synchronize()
        t = sorted(cp.cuda.get_elapsed_time(s, e) for s, e in ev)
        q1, q3 = t[(len(t) - 1) // 4], t[(3 * (len(t) - 1) + 3) // 4]
        med = t[len(t) // 2] if len(t) % 2 else 0.5 * (t[len(t) // 2 - 1] + t[len(t) // 2])
        return {"median_ms": med, "iqr_ms": q3 - q1, "min_ms": t[0], "max_ms": t[-1], "reps": reps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?", default=os.environ.get("OUTDIR") or os.environ.get("OUT") or ".")
    ap.add_argument("--cpu-check", action="store_true")
    args = ap.parse_args()
    if args.cpu_check:
        sys.exit(1 if cpu_check() else 0)
    outdir = pathlib.Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    out_json = outdir / "sgemm-ladder.json"
    R = {"script": "labs/results/logs/2026-12-01/sgemm-ladder-sweep.py", "started": datetime.datetime.now().isoformat(),
         "fma_roof_tflops": FMA_ROOF_TFLOPS, "tolerances": {"max_err_rel": TOL_ELEM, "fro_err": TOL_FRO},
         "rungs": {}, "timings": [], "cublas": [], "sweep": [], "tuned": None, "notes": [], "output": str(out_json)}

    def save():
        R["elapsed_s"] = round(time.time() - T0, 1)
        tmp = out_json.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(R, indent=1, default=str))
        tmp.replace(out_json)

    import cupy as cp
    import numpy as np
    dev = cp.cuda.runtime.getDeviceProperties(0)
    cc = f"{dev['major']}{dev['minor']}"
    arch = f"sm_{cc}"
    R["gpu"] = {"name": dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"], "sms": dev["multiProcessorCount"],
                "l2_bytes": dev["l2CacheSize"], "arch": arch, "cupy": cp.__version__,
                "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(), "driver": cp.cuda.runtime.driverGetVersion(),
                "nvrtc": list(cp.cuda.nvrtc.getVersion())}
    log("GPU", R["gpu"])

    # ---- items for the rung checks
    items = []
    for name, file, func, defs in RUNGS:
        src = (KDIR / file).read_text()
        mac = {**macro_defaults(src), **defs}
        bm, bn, block, smem = geometry(file, mac)
        items.append(dict(name=name, file=file, func=func, defs=defs, src=src, bm=bm, bn=bn, block=block, smem=smem,
                          shapes=CHECK_SHAPES))
        R["rungs"][name] = {"file": f"kernels/05-gemm-simt/{file}", "entry": func, "defs": defs,
                            "grid": f"(ceil(N/{bn}), ceil(M/{bm}))", "block": list(block), "dynamic_smem": smem}

    # ---- compile pool (CPU): ptxas reports of the rungs, cubins of the sweep variants (most promising first)
    src8 = (KDIR / "08_double_buffer.cu").read_text()
    base8 = macro_defaults(src8)
    cfgs = sweep_configs(base8)
    tmpdir = pathlib.Path(tempfile.mkdtemp(prefix="sgemm05-"))
    # NVRTC through cupy holds the GIL: compile in spawned processes (CPU only, no CUDA context there)
    pool = cf.ProcessPoolExecutor(max(1, min(12, (os.cpu_count() or 2) - 2)), mp_context=mp.get_context("spawn"))
    rung_futs = {it["name"]: pool.submit(nvrtc_compile, it["src"], arch, it["defs"], it["file"], False) for it in items}
    cfg_futs = [pool.submit(nvrtc_compile, src8, arch, c, "08_double_buffer.cu", True) for c in cfgs]
    T_SWEEP = time.time()                       # the sweep's 150 s run from here
    sweep_deadline = min(T_SWEEP + SWEEP_GUARD_S, T0 + GLOBAL_GUARD_S - 45)
    log(f"compiling {len(items)} rungs and {len(cfgs)} sweep variants in the background")

    # ---- phase 1: rung checks in a child
    res = run_in_children(items, arch, T0 + GLOBAL_GUARD_S - 60)
    passed = []
    for i, it in enumerate(items):
        r = res.get(i, {"error": "no result"})
        R["rungs"][it["name"]].update({k: v for k, v in r.items()})
        ok = bool(r.get("ok")) and not r.get("error")
        R["rungs"][it["name"]]["ok"] = ok
        bad = [c for c in r.get("checks", []) if not c.get("ok")]
        log(f"check {it['name']:30s} {'PASS' if ok else 'FAIL'} regs={r.get('registers')} local={r.get('local_bytes')}"
            + (f"  {r.get('error')}" if r.get("error") else "")
            + (f"  failed: {[(c['shape'], c.get('error') or (round(c.get('max_err_rel', 0), 9), c.get('nan'), c.get('canary_ok'))) for c in bad][:3]}" if bad else ""))
        if ok:
            passed.append(i)
    for name, f in rung_futs.items():
        try:
            ok, lg, _, dt = f.result(timeout=max(1.0, T0 + 150 - time.time()))
            R["rungs"][name]["ptxas"] = {**parse_ptxas(lg), "log": [l for l in lg.splitlines() if "ptxas" in l][-4:]}
        except Exception as e:
            R["rungs"][name]["ptxas"] = {"error": repr(e)}
    save()

    # ---- phase 2: the sweep variants: wait for the compiles (guarded), check them in a child
    sweep_items, sweep_rows = [], []
    for c, f in zip(cfgs, cfg_futs):
        row = {"config": c, "name": cfg_name(c)}
        sweep_rows.append(row)
        left = sweep_deadline - 60 - time.time()
        if left <= 0 and not f.done():
            row["status"] = "skipped: time guard (compile)"
            f.cancel()
            continue
        try:
            ok, lg, cubin, dt = f.result(timeout=max(0.1, left))
        except Exception as e:
            row["status"] = f"skipped: compile not finished ({type(e).__name__})"
            continue
        row.update(parse_ptxas(lg), compile_s=round(dt, 2))
        _, _, block, smem = geometry("08_double_buffer.cu", {**base8, **c})
        row.update(threads=block[0], dynamic_smem=smem)
        if not ok:
            row["status"] = "compile error"
            row["log"] = lg[-1500:]
            continue
        if (row.get("spill_stores") or 0) + (row.get("spill_loads") or 0) > 0:
            row["status"] = "skipped: ptxas spills"
            continue
        path = tmpdir / f"v{len(sweep_items)}.cubin"
        path.write_bytes(cubin)
        row["_item"] = len(sweep_items)
        sweep_items.append(dict(name=row["name"], file="08_double_buffer.cu", func="sgemm_double_buffer", defs=c, cubin=str(path),
                                bm=c["BM"], bn=c["BN"], block=block, smem=smem, shapes=SWEEP_CHECK_SHAPES))
    pool.shutdown(wait=False, cancel_futures=True)
    log(f"sweep: {len(sweep_items)} of {len(cfgs)} variants compiled without spills; checking them in a child")
    sres = run_in_children(sweep_items, arch, sweep_deadline - 35) if sweep_items else {}
    for row in sweep_rows:
        if "_item" in row:
            r = sres.get(row["_item"], {"error": "no result"})
            row["registers_runtime"], row["local_bytes"] = r.get("registers"), r.get("local_bytes")
            if r.get("ok") and not r.get("error"):
                row["status"] = "checked"
            else:
                row["status"] = "failed check: " + str(r.get("error") or [c for c in r.get("checks", []) if not c.get("ok")][:2])[:400]
            if r.get("local_bytes"):
                row["status"] = f"skipped: {r['local_bytes']} B of local memory (spills)"
    R["sweep"] = [{k: v for k, v in row.items() if k != "_item"} for row in sweep_rows]
    save()

    # ---- phase 3: timing in this process
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    R["gpu"]["torch"] = torch.__version__
    if torch.cuda.current_stream().cuda_stream != 0:
        R["notes"].append("torch's current stream is not the legacy default stream: cuBLAS timed on torch's stream")
    timer = Timer(cp)
    data = {}

    def shape_data(shape):
        if shape not in data:
            M, N, K = shape
            A = cp.random.standard_normal(M * K, dtype=cp.float32)
            B = cp.random.standard_normal(K * N, dtype=cp.float32)
            cbuf = cp.empty(M * N + CANARY, dtype=cp.float32)
            tA, tB = torch.from_dlpack(A.reshape(M, K)), torch.from_dlpack(B.reshape(K, N))
            tC = torch.empty((M, N), dtype=torch.float32, device="cuda")
            torch.matmul(tA, tB, out=tC)
            S = torch.matmul(tA.abs(), tB.abs())
            torch.cuda.synchronize()
            data[shape] = dict(A=A, B=B, cbuf=cbuf, tA=tA, tB=tB, tC=tC, S=S)
        return data[shape]

    def time_cublas(shape, reps=RUNS, tag=""):
        d = shape_data(shape)
        M, N, K = shape
        st = torch.cuda.current_stream()

        def launch():
            torch.matmul(d["tA"], d["tB"], out=d["tC"])
        if st.cuda_stream == 0:
            t = timer.bench(launch, reps)
        else:                                   # torch on its own stream: time with torch events there
            for _ in range(WARMUP):
                launch()
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for s, e in ev:
                torch.cuda.synchronize(); timer.flush(); cp.cuda.runtime.deviceSynchronize()
                s.record(); launch(); e.record()
            torch.cuda.synchronize()
            ts = sorted(s.elapsed_time(e) for s, e in ev)
            t = {"median_ms": ts[len(ts) // 2], "iqr_ms": ts[(3 * len(ts)) // 4] - ts[len(ts) // 4], "min_ms": ts[0],
                 "max_ms": ts[-1], "reps": reps}
        t.update(shape=list(shape), tflops=2 * M * N * K / t["median_ms"] / 1e9, tag=tag)
        R["cublas"].append(t)
        log(f"cuBLAS {shape} {tag}: {t['median_ms']:.4f} ms {t['tflops']:.2f} TFLOP/s")
        return t

    def cublas_ms(shape):
        ts = [t["median_ms"] for t in R["cublas"] if tuple(t["shape"]) == tuple(shape)]
        return min(ts) if ts else None

    def time_kernel(name, fn, geo, shape, reps, config=None):
        bm, bn, block, smem = geo
        M, N, K = shape
        d = shape_data(shape)
        grid = ((N + bn - 1) // bn, (M + bm - 1) // bm, 1)
        args = (d["A"], d["B"], d["cbuf"], np.int32(M), np.int32(N), np.int32(K))
        pattern = cp.arange(CANARY, dtype=cp.float32) + 12345.0
        d["cbuf"][:M * N] = cp.nan
        d["cbuf"][M * N:] = pattern

        def launch():
            fn(grid, block, args, shared_mem=smem)
        launch()
        cp.cuda.runtime.deviceSynchronize()
        c = torch.from_dlpack(d["cbuf"][:M * N].reshape(M, N))
        nan = int(torch.isnan(c).sum().item())
        max_vs = float(((c - d["tC"]).abs() / d["S"].clamp_min(1e-30)).max().item())
        canary_ok = bool(cp.all(d["cbuf"][M * N:] == pattern))
        t = timer.bench(launch, reps)
        ok = nan == 0 and canary_ok and max_vs <= TOL_ELEM
        cb = cublas_ms(shape)
        rec = dict(kernel=name, config=config, shape=list(shape), **t, tflops=2 * M * N * K / t["median_ms"] / 1e9,
                   pct_cublas=100 * cb / t["median_ms"] if cb else None, cublas_ms=cb,
                   pct_fma_roof=100 * (2 * M * N * K / t["median_ms"] / 1e9) / FMA_ROOF_TFLOPS,
                   max_err_rel_vs_cublas=max_vs, nan=nan, canary_ok=canary_ok, ok=ok)
        return rec

    def load_rung(i):
        it = items[i]
        opts = ("-std=c++17", f"-arch={arch}", *[f"-D{k}={v}" for k, v in it["defs"].items()])
        fn = cp.RawModule(code=it["src"], options=opts).get_function(it["func"])
        if it["smem"] > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = it["smem"]
        return fn, (it["bm"], it["bn"], tuple(it["block"]), it["smem"])

    try:
        for shape in (BIG, MID, RECT):
            shape_data(shape)
        warm = time.time()
        while time.time() - warm < 1.0:         # clocks up before the first timing
            torch.matmul(data[BIG]["tA"], data[BIG]["tB"], out=data[BIG]["tC"])
        torch.cuda.synchronize()
        R["gpu"]["smi_after_warmup"] = smi()
        for shape in (BIG, MID, RECT):
            time_cublas(shape, RUNS, "before the ladder")
    except Exception as e:
        R["notes"].append(f"cuBLAS baseline failed: {e!r}")
        log("cuBLAS failed:", repr(e))
    save()

    for i in passed:
        name = items[i]["name"]
        if time.time() > T0 + GLOBAL_GUARD_S - 20:
            R["notes"].append(f"{name}: not timed (global time guard)")
            continue
        try:
            fn, geo = load_rung(i)
            if name in SLOW:
                rec = time_kernel(name, fn, geo, MID, RUNS)
                R["timings"].append(rec)
                log(f"time {name:30s} {MID}: {rec['median_ms']:.3f} ms {rec['tflops']:.2f} TFLOP/s")
                est = rec["median_ms"] * 8
                if est * (SLOW_RUNS + WARMUP) < 15000:
                    rec = time_kernel(name, fn, geo, BIG, SLOW_RUNS)
                    R["timings"].append(rec)
                else:
                    R["notes"].append(f"{name}: 4096^3 skipped (estimated {est:.0f} ms per run)")
                    continue
            else:
                rec = time_kernel(name, fn, geo, BIG, RUNS)
                R["timings"].append(rec)
            log(f"time {name:30s} {tuple(rec['shape'])}: {rec['median_ms']:.3f} ms {rec['tflops']:.2f} TFLOP/s "
                f"{rec['pct_cublas'] or 0:.1f}% of cuBLAS{'' if rec['ok'] else '  WRONG RESULT vs cuBLAS'}")
            if name in RECT_RUNGS:
                rec = time_kernel(name, fn, geo, RECT, RUNS)
                R["timings"].append(rec)
                log(f"time {name:30s} {RECT}: {rec['median_ms']:.3f} ms {rec['tflops']:.2f} TFLOP/s {rec['pct_cublas'] or 0:.1f}% of cuBLAS")
        except Exception as e:
            R["timings"].append(dict(kernel=name, error=repr(e)[:1000]))
            log(f"time {name} failed: {e!r}")
            if "cudaError" in repr(e) or "CUDA_ERROR" in repr(e):
                R["notes"].append("CUDA context lost while timing; stopping")
                save()
                return finish(R, save)
        save()

    # ---- phase 4: the sweep at 4096^3 (10 runs each), within the sweep guard
    log(f"sweep: timing {sum(1 for r in sweep_rows if r.get('status') == 'checked')} variants at {BIG}")
    n = len(sweep_rows)
    for k, row in enumerate(sweep_rows):
        if row.get("status") != "checked":
            log(f"[{k + 1}/{n}] {row['name']}: {row.get('status')}")
            continue
        if time.time() > sweep_deadline:
            row["status"] = "skipped: time guard"
            log(f"[{k + 1}/{n}] {row['name']}: skipped (time guard)")
            continue
        try:
            it = sweep_items[row["_item"]]
            fn = cp.RawModule(path=it["cubin"]).get_function("sgemm_double_buffer")
            if it["smem"] > 48 * 1024:
                fn.max_dynamic_shared_size_bytes = it["smem"]
            rec = time_kernel("08_double_buffer", fn, (it["bm"], it["bn"], tuple(it["block"]), it["smem"]), BIG, SWEEP_RUNS,
                              config=row["config"])
            row.update({kk: rec[kk] for kk in ("median_ms", "iqr_ms", "tflops", "pct_cublas", "pct_fma_roof",
                                                "max_err_rel_vs_cublas", "nan", "canary_ok")})
            row["status"] = "timed" if rec["ok"] else "wrong result at 4096^3"
            log(f"[{k + 1}/{n}] {row['name']}: regs={row.get('registers')} smem={row.get('dynamic_smem')} "
                f"{rec['median_ms']:.3f} ms {rec['tflops']:.2f} TFLOP/s {rec['pct_cublas'] or 0:.1f}% of cuBLAS"
                f"{'' if rec['ok'] else '  WRONG'}")
        except Exception as e:
            row["status"] = f"error: {e!r}"[:400]
            log(f"[{k + 1}/{n}] {row['name']}: {e!r}")
            if "cudaError" in repr(e) or "CUDA_ERROR" in repr(e):
                R["notes"].append("CUDA context lost in the sweep; stopping")
                break
    R["sweep"] = [{kk: v for kk, v in r.items() if kk != "_item"} for r in sweep_rows]
    R["gpu"]["smi_after_sweep"] = smi()
    save()

    # ---- phase 5: the tuned rung: full checks in a child, then timed again
    timed = [r for r in sweep_rows if r.get("status") == "timed"]
    if timed:
        best = min(timed, key=lambda r: r["median_ms"])
        it = dict(sweep_items[best["_item"]], shapes=CHECK_SHAPES, name="tuned " + best["name"])
        tres = run_in_children([it], arch, T0 + GLOBAL_GUARD_S - 15) if time.time() < T0 + GLOBAL_GUARD_S - 30 else {}
        tr = tres.get(0, {"error": "not checked (time guard)"})
        tuned = {"config": best["config"], "name": best["name"], "defines": " ".join(f"-D{k}={v}" for k, v in best["config"].items()),
                 "ok": bool(tr.get("ok")) and not tr.get("error"), "checks": tr.get("checks"), "error": tr.get("error"),
                 "registers": best.get("registers"), "sweep_median_ms": best["median_ms"]}
        log(f"tuned: {best['name']}  checks {'PASS' if tuned['ok'] else 'FAIL ' + str(tr.get('error'))}")
        if tuned["ok"] and time.time() < T0 + GLOBAL_GUARD_S - 5:
            try:
                fn = cp.RawModule(path=it["cubin"]).get_function("sgemm_double_buffer")
                if it["smem"] > 48 * 1024:
                    fn.max_dynamic_shared_size_bytes = it["smem"]
                geo = (it["bm"], it["bn"], tuple(it["block"]), it["smem"])
                for shape, reps in ((BIG, TUNED_RUNS), (RECT, RUNS)):
                    rec = time_kernel("08_tuned", fn, geo, shape, reps, config=best["config"])
                    R["timings"].append(rec)
                    log(f"time 08_tuned {shape}: {rec['median_ms']:.3f} ms {rec['tflops']:.2f} TFLOP/s {rec['pct_cublas'] or 0:.1f}% of cuBLAS")
            except Exception as e:
                R["notes"].append(f"tuned timing failed: {e!r}")
        R["tuned"] = tuned
        save()
    try:
        if time.time() < T0 + GLOBAL_GUARD_S:
            time_cublas(BIG, RUNS, "after the ladder")
            time_cublas(RECT, RUNS, "after the ladder")
    except Exception as e:
        R["notes"].append(f"cuBLAS (after) failed: {e!r}")
    # % of cuBLAS against the faster of the before/after medians
    for rec in R["timings"]:
        if "median_ms" in rec:
            cb = cublas_ms(rec["shape"])
            rec["cublas_ms"], rec["pct_cublas"] = cb, (100 * cb / rec["median_ms"] if cb else None)
    for row in R["sweep"]:
        if row.get("median_ms"):
            cb = cublas_ms(BIG)
            row["pct_cublas"] = 100 * cb / row["median_ms"] if cb else None
    return finish(R, save)


def finish(R, save):
    save()
    print("\n== Chapter 05 SGEMM ladder, fp32, C = A @ B (cuBLAS with TF32 off; roof {:.0f} TFLOP/s) ==".format(FMA_ROOF_TFLOPS))
    print(f"{'kernel':30s} {'shape':>16s} {'median ms':>10s} {'IQR':>7s} {'TFLOP/s':>8s} {'% cuBLAS':>8s} {'% roof':>7s} {'regs':>5s}  check")
    for shape in sorted({tuple(t["shape"]) for t in R["cublas"]}):
        ms = min(t["median_ms"] for t in R["cublas"] if tuple(t["shape"]) == shape)
        iqr = min(t["iqr_ms"] for t in R["cublas"] if tuple(t["shape"]) == shape and t["median_ms"] == ms)
        M, N, K = shape
        tf = 2 * M * N * K / ms / 1e9
        print(f"{'cuBLAS (torch.matmul)':30s} {'x'.join(map(str, shape)):>16s} {ms:10.4f} {iqr:7.4f} {tf:8.2f} {100.0:8.1f} {100 * tf / FMA_ROOF_TFLOPS:7.1f} {'':>5s}")
    for t in R["timings"]:
        if "median_ms" not in t:
            print(f"{t.get('kernel', '?'):30s} error: {t.get('error')}")
            continue
        regs = (R["tuned"] or {}).get("registers") if t["kernel"] == "08_tuned" else R["rungs"].get(t["kernel"], {}).get("registers")
        pc = f"{t['pct_cublas']:8.1f}" if t.get("pct_cublas") else f"{'':>8s}"
        print(f"{t['kernel']:30s} {'x'.join(map(str, t['shape'])):>16s} {t['median_ms']:10.4f} {t['iqr_ms']:7.4f} {t['tflops']:8.2f} {pc} "
              f"{t['pct_fma_roof']:7.1f} {regs if regs is not None else '':>5}  {'ok' if t['ok'] else 'WRONG'}")
    for name, r in R["rungs"].items():
        if not r.get("ok"):
            print(f"{name:30s} not timed: {r.get('error') or 'failed checks'}")
    timed = sorted((r for r in R["sweep"] if r.get("median_ms")), key=lambda r: r["median_ms"])
    if R["sweep"]:
        st = {}
        for r in R["sweep"]:
            key = (r.get("status") or "?").split(":")[0]
            st[key] = st.get(key, 0) + 1
        print(f"sweep: {len(R['sweep'])} variants, {st}; fastest:")
        for r in timed[:5]:
            print(f"  {r['name']:62s} {r['median_ms']:.4f} ms {r['tflops']:6.2f} TFLOP/s {r.get('pct_cublas') or 0:5.1f}% regs={r.get('registers')}")
    if R["tuned"]:
        print(f"tuned: {R['tuned']['defines']}  checks {'PASS' if R['tuned']['ok'] else 'FAIL'}")
    for n in R["notes"]:
        print("note:", n)
    print(f"total {time.time() - T0:.1f} s; results in {R.get('output', 'sgemm-ladder.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
