"""Chapter 07 kernel ladder (bf16 GEMM on Hopper: wgmma, TMA, mbarrier rings, warp specialisation) on one GPU.

Run from anywhere on an sm_90 GPU machine (cupy, numpy, torch, cuda.bindings; labkit is not used):

    python3 labs/results/logs/2026-12-01/gemm-hopper-ladder-sweep.py [OUTDIR]

OUTDIR defaults to $OUTDIR, else $OUT, else the current directory; the results go to
OUTDIR/gemm-hopper-ladder.json and a compact table is printed last.

C[M, N] = A[M, K] @ B_t[N, K]^T with A and B_t row-major bf16 (both K-major, the "TN" layout of nn.Linear),
C row-major bf16, fp32 accumulation. Steps:
 1. every rung of kernels/07-gemm-hopper/ (and the sweep variants of the last rungs) is compiled with NVRTC
    for sm_90a (no GPU needed): ptxas report (registers, spills) and any ptxas warning that mentions wgmma
    (serialised wgmma costs 2-3x: such a build counts as failed); with cuobjdump on PATH the SASS is
    checked for HGMMA, UTMALDG (TMA loads), UTMASTG (TMA stores) and multicast;
 2. each build is launched first in a spawned child process, never in this one: small and irregular
    shapes (tails in M, N and K; many tiles per block for the persistent kernels), NaN-poisoned output
    with a canary tail, error max|c - ref| / (sqrt(K) rms(a) rms(b)) against an fp32 torch reference.
    A child that makes no progress for 20 s (a hang, e.g. a wrong mbarrier parity) is killed and the
    build skipped; a fault ends the child (its CUDA context is lost) and a fresh child takes the rest;
 3. this process then times the builds that passed at 4096^3, 8192^3 and 8192 x 28672 x 8192 against
    cuBLAS (torch.nn.functional.linear on the same data) in the same run: CUDA events, warm-up, L2
    flushed by reading a 120 MiB buffer before every run, median of 20 runs (10 at the largest shape);
    every timed output is compared with cuBLAS's;
 4. a small sweep (stages, tile width, cluster size, group size, grid size) of the best rung, within a
    90 s guard. The whole script aims at well under 4 minutes.
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

T_START = time.time()
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[3] if len(HERE.parents) > 3 else HERE
KDIR = pathlib.Path(os.environ.get("GEMM07_KDIR", ROOT / "kernels" / "07-gemm-hopper"))
NVRTC_OPTS = ("-std=c++17", "-arch=sm_90a", f"-I{KDIR.parent}")
CHILD_STALL_S = 20.0          # no progress from a child for this long: kill it, skip the build
CHILD_READY_S = 180.0         # importing torch + cupy in a fresh child
SWEEP_GUARD_S = 90.0
TOTAL_GUARD_S = 225.0         # stop timing new things past this (the script must end within 4 minutes)
WGMMA_ROOF_TFLOPS = 950.0     # wgmma m64n128/256k16 from shared memory, measured on this H200 (946-962)
BK = 64

# --------------------------------------------------------------------------------------------------------
# The ladder. `defines` override the #ifndef defaults of the file. kind: "ptr" (A, B, C pointers), "tma"
# (tensor maps for A and B, C pointer), "tma_store" (tensor maps for A, B and C). sched: "grid2d" (one block
# per tile), "persistent" (grid = min(tiles, SMs)), "cluster" (persistent over cluster tiles).
RUNGS = [
    dict(rung="01", file="01_wgmma_smem.cu", entry="gemm_wgmma_smem", kind="ptr", sched="grid2d", threads=256),
    dict(rung="02", file="02_tma_wgmma.cu", entry="gemm_tma_wgmma", kind="tma", sched="grid2d", threads=256),
    dict(rung="03", file="03_tma_ring.cu", entry="gemm_tma_ring", kind="tma", sched="grid2d", threads=256),
    dict(rung="04", file="04_warp_specialized.cu", entry="gemm_warp_specialized", kind="tma", sched="grid2d", threads=384),
    dict(rung="05", file="05_persistent.cu", entry="gemm_persistent", kind="tma", sched="persistent", threads=384),
    dict(rung="06", file="06_cluster_multicast.cu", entry="gemm_cluster_multicast", kind="tma", sched="cluster", threads=384),
    dict(rung="07", file="07_tma_store.cu", entry="gemm_tma_store", kind="tma_store", sched="cluster", threads=384),
]
# Variants verified up front (children) and swept later for the best of rungs 05-07. "grid_cap" changes
# only the launch (same binary), so it is checked on the same child run as its build.
SWEEP = {
    "03": [dict(STAGES=3), dict(BN=256)],
    "05": [dict(STAGES=3), dict(BN=128), dict(GROUP_M=16)],
    "06": [dict(STAGES=3), dict(CLUSTER=1), dict(GROUP_M=4), dict(GROUP_M=16)],
    "07": [dict(STAGES=3), dict(CLUSTER=1), dict(GROUP_M=4), dict(GROUP_M=16), dict(BN=128)],
}
GRID_CAPS = (None, 128)       # persistent grids: all SMs, or 128 CTAs (clusters of 2 may not all fit at once)

CHECK_SHAPES = [(256, 256, 128), (333, 264, 200), (2600, 4360, 328)]
CHECK_SHAPE_FEW_BLOCKS = (2600, 4360, 328, 8)      # persistent rungs: 8 CTAs, ~47 tiles each
TIME_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 8192)]
CANARY = 4096                                       # bf16 elements after C that must stay untouched
CANARY_BITS = 0x3C5A
ERR_TOL = 0.03                                      # bf16 output rounding alone gives <= ~0.018 here
AGREE_TOL = 0.08                                    # two bf16 results (ours, cuBLAS's) differ by <= 1 ulp


def log(*a):
    print(f"[{time.time() - T_START:6.1f}s]", *a, flush=True)


# --------------------------------------------------------------------------------------------------------
# Build description (host side mirrors the macros of each file; the kernels trap on a mismatch of block
# size or dynamic shared memory, so a wrong mirror fails the check instead of corrupting memory).
def file_defaults(src):
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r"#ifndef\s+(\w+)\s*\n\s*#define\s+\1\s+(-?\d+)", src)}


def build_config(rung, defines):
    src = (KDIR / rung["file"]).read_text()
    d = file_defaults(src)
    d.update(defines)
    bm, bn = 128, d.get("BN", 128)
    stages, cluster = d.get("STAGES", 1), d.get("CLUSTER", 1)
    r = rung["rung"]
    if r == "01":
        smem = 1024 + (bm + bn) * BK * 2
    elif r == "02":
        smem = 1024 + (bm + bn) * BK * 2 + 8
    elif r in ("03", "04", "05", "06"):
        smem = 1024 + stages * (bm + bn) * BK * 2 + 16 * stages
    else:
        smem = 1024 + stages * (bm + bn) * BK * 2 + 2 * 2 * 64 * 64 * 2 + 16 * stages
    name = rung["file"][:-3] + "".join(f" {k}={v}" for k, v in sorted(defines.items()))
    return dict(name=name, rung=r, file=rung["file"], entry=rung["entry"], kind=rung["kind"],
                sched=rung["sched"], threads=rung["threads"], BM=bm, BN=bn, STAGES=stages,
                CLUSTER=cluster, GROUP_M=d.get("GROUP_M"), smem=smem, defines=dict(defines),
                options=list(NVRTC_OPTS) + [f"-D{k}={v}" for k, v in sorted(defines.items())], src=src)


def launch_geometry(cfg, M, N, sms, grid_cap=None):
    bm, bn, cl = cfg["BM"], cfg["BN"], cfg["CLUSTER"]
    tm, tn = -(-M // bm), -(-N // bn)
    if cfg["sched"] == "grid2d":
        return (tn, tm, 1)
    cap = sms if grid_cap is None else min(sms, grid_cap)
    if cfg["sched"] == "persistent":
        return (max(1, min(tm * tn, cap)), 1, 1)
    ctiles = -(-tm // cl) * tn
    return (cl * max(1, min(ctiles, cap // cl)), 1, 1)


# --------------------------------------------------------------------------------------------------------
# Tensor maps (cuda.bindings.driver.cuTensorMapEncodeTiled)
TMA_DT = np.dtype([("w", np.uint64, (16,))])


def make_tmap(t, box_rows, box_cols=64):
    """2-D tensor map of a row-major bf16 torch tensor, 128-byte swizzle, zero fill out of bounds.
    Returns a NumPy structured scalar holding the 128 opaque bytes (passed by value to the kernel)."""
    import torch
    from cuda.bindings import driver as cu
    if t.dtype != torch.bfloat16:
        raise ValueError(f"tensor map: dtype must be bfloat16, got {t.dtype}")
    if t.dim() != 2 or not t.is_contiguous():
        raise ValueError(f"tensor map: need a contiguous 2-D tensor, got shape {tuple(t.shape)} strides {t.stride()}")
    rows, cols = t.shape
    ptr = t.data_ptr()
    if ptr % 16:
        raise ValueError(f"tensor map: global address {ptr:#x} is not 16-byte aligned")
    if (cols * 2) % 16:
        raise ValueError(f"tensor map: row stride {cols * 2} B is not a multiple of 16 (need {cols} % 8 == 0)")
    if cols * 2 >= 1 << 40 or rows > 1 << 32 or cols > 1 << 32:
        raise ValueError("tensor map: tensor too large for a tensor map")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise ValueError(f"tensor map: box {box_cols} x {box_rows} outside 1..256")
    if box_cols * 2 != 128:
        raise ValueError(f"tensor map: the 128-byte swizzle layout of these kernels needs an inner box of 64 "
                         f"bf16 (128 B), got {box_cols}")
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, u32(2), ptr,
        [u64(cols), u64(rows)], [u64(cols * 2)], [u32(box_cols), u32(box_rows)], [u32(1), u32(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if int(err) != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err} (shape {rows} x {cols}, box {box_cols} x {box_rows})")
    op = tmap.opaque
    words = [int(x) for x in op] if len(op) == 16 else list(np.frombuffer(bytes(op), dtype=np.uint64))
    if len(words) != 16:
        raise RuntimeError(f"unexpected CUtensorMap.opaque layout ({len(op)} items)")
    arr = np.zeros(1, dtype=TMA_DT)
    arr["w"][0] = np.array(words, dtype=np.uint64)
    return arr[0]


class Launcher:
    """Loads one build (CuPy RawModule, NVRTC) and launches it on given torch tensors."""

    def __init__(self, cfg):
        import cupy as cp
        self.cfg = cfg
        mod = None
        if cfg.get("cubin"):                      # the very binary whose ptxas report and SASS were checked
            try:
                mod = cp.RawModule(path=cfg["cubin"])
                self.kern = mod.get_function(cfg["entry"])
            except Exception:
                mod = None
        if mod is None:
            mod = cp.RawModule(code=cfg["src"], options=tuple(cfg["options"]), backend="nvrtc")
            self.kern = mod.get_function(cfg["entry"])
        self.kern.max_dynamic_shared_size_bytes = cfg["smem"]
        self.sms = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())["multiProcessorCount"]

    def attributes(self):
        k = self.kern
        out = {}
        for a in ("num_regs", "shared_size_bytes", "local_size_bytes", "max_threads_per_block"):
            try:
                out[a] = int(getattr(k, a))
            except Exception:
                pass
        return out

    def resident_clusters(self):
        """How many clusters of this kernel fit on the GPU at once (cuOccupancyMaxActiveClusters), or None."""
        cfg = self.cfg
        if cfg["CLUSTER"] < 2:
            return None
        from cuda.bindings import driver as cu
        f = cu.CUfunction(int(self.kern.kernel.ptr))
        for with_attr in (False, True):
            try:
                lc = cu.CUlaunchConfig()
                lc.gridDimX, lc.gridDimY, lc.gridDimZ = cfg["CLUSTER"] * (self.sms // cfg["CLUSTER"]), 1, 1
                lc.blockDimX, lc.blockDimY, lc.blockDimZ = cfg["threads"], 1, 1
                lc.sharedMemBytes = cfg["smem"]
                if with_attr:
                    at = cu.CUlaunchAttribute()
                    at.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                    at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = cfg["CLUSTER"], 1, 1
                    lc.attrs = [at]
                    lc.numAttrs = 1
                err, n = cu.cuOccupancyMaxActiveClusters(f, lc)
                if int(err) == 0 and int(n) > 0:
                    return int(n)
            except Exception:
                pass
        return None

    def bind(self, a, b_t, c, M, N, K, grid_cap=None):
        """Returns a no-argument function that launches the kernel (tensor maps built once here)."""
        cfg = self.cfg
        if K % 8 or N % 8:
            raise ValueError(f"contract: K % 8 == 0 and N % 8 == 0 (got M={M} N={N} K={K})")
        if min(M, N, K) < 1:
            raise ValueError("empty problem")
        i32 = np.int32
        if cfg["kind"] == "ptr":
            args = (np.uint64(a.data_ptr()), np.uint64(b_t.data_ptr()), np.uint64(c.data_ptr()), i32(M), i32(N), i32(K))
        elif cfg["kind"] == "tma":
            args = (make_tmap(a, cfg["BM"]), make_tmap(b_t, cfg["BN"] // cfg["CLUSTER"]),
                    np.uint64(c.data_ptr()), i32(M), i32(N), i32(K))
        else:
            c2 = c[: M * N].view(M, N) if c.dim() == 1 else c
            args = (make_tmap(a, cfg["BM"]), make_tmap(b_t, cfg["BN"] // cfg["CLUSTER"]), make_tmap(c2, 64),
                    i32(M), i32(N), i32(K))
        grid = launch_geometry(cfg, M, N, self.sms, grid_cap)
        block = (cfg["threads"], 1, 1)
        kern, smem = self.kern, cfg["smem"]
        self.keep = (args,)      # the tensor maps point at these tensors' memory

        def run():
            kern(grid, block, args, shared_mem=smem)
        run.grid = grid
        return run


# --------------------------------------------------------------------------------------------------------
# Step 1: compile with NVRTC (no GPU), ptxas report, SASS.
def fix_cubin(b):
    """Some CuPy versions drop trailing bytes of NVRTC's CUBIN (it is treated as a C string): pad the ELF
    image back to the end of its program/section header tables."""
    b = bytearray(b)
    if len(b) < 64 or b[:4] != b"\x7fELF":
        return bytes(b)
    phoff, shoff = struct.unpack_from("<QQ", b, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", b, 0x36)
    need = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    if need > len(b):
        b += b"\0" * (need - len(b))
    return bytes(b)


def compile_report(cfg, workdir):
    from cupy.cuda import nvrtc
    rep = dict(compiled=False)
    for extra in (["--no-cache"], []):            # an NVRTC that does not know --no-cache: retry without
        prog = nvrtc.createProgram(cfg["src"], cfg["file"], [], [])
        try:
            nvrtc.compileProgram(prog, list(cfg["options"]) + ["-Xptxas=-v"] + extra)
            rep["compiled"] = True
            break
        except nvrtc.NVRTCError as e:
            rep["error"] = repr(e)
            lg = nvrtc.getProgramLog(prog)
            lg = lg.decode(errors="replace") if isinstance(lg, bytes) else str(lg)
            if "no-cache" not in lg and "INVALID_OPTION" not in repr(e):
                break
    if rep["compiled"]:
        rep.pop("error", None)
    logtxt = nvrtc.getProgramLog(prog)
    if isinstance(logtxt, bytes):
        logtxt = logtxt.decode(errors="replace")
    logtxt = logtxt.replace("\x00", "").strip()
    rep["log"] = logtxt[-4000:]
    m = re.search(r"Used (\d+) registers", logtxt)
    rep["regs"] = int(m.group(1)) if m else None
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", logtxt)
    rep["spill_bytes"] = (int(m.group(1)) + int(m.group(2))) if m else None
    rep["wgmma_warnings"] = [l for l in logtxt.splitlines() if "wgmma" in l.lower() and "warn" in l.lower()]
    rep["warnings"] = [l for l in logtxt.splitlines() if "warn" in l.lower()]
    rep["ok"] = bool(rep["compiled"] and not rep["wgmma_warnings"] and not rep["spill_bytes"])
    if rep["compiled"]:
        path = pathlib.Path(workdir) / (re.sub(r"[^A-Za-z0-9_.=-]+", "_", cfg["name"]) + ".cubin")
        try:
            path.write_bytes(fix_cubin(nvrtc.getCUBIN(prog)))
            rep["cubin"] = str(path)
        except Exception as e:
            rep["cubin_error"] = repr(e)
        cuobjdump = shutil.which("cuobjdump")
        if cuobjdump and rep.get("cubin"):
            try:
                sass = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True,
                                      timeout=60).stdout
                if "Function" not in sass or sass.count("\n") < 50:
                    raise RuntimeError("cuobjdump printed no SASS for this cubin: " + sass[:200])
                rep["sass"] = dict(HGMMA=len(re.findall(r"\bHGMMA\.", sass)),
                                   UTMALDG=len(re.findall(r"\bUTMALDG\b", sass)),
                                   UTMALDG_MULTICAST=len(re.findall(r"\bUTMALDG\.\S*MULTICAST", sass)),
                                   UTMASTG=len(re.findall(r"\bUTMASTG\b", sass)),
                                   USETMAXREG=len(re.findall(r"\bUSETMAXREG\b", sass)),
                                   lines=sass.count("\n"))
                want_tma = cfg["kind"] != "ptr"
                rep["sass_ok"] = rep["sass"]["HGMMA"] > 0 and (rep["sass"]["UTMALDG"] > 0 or not want_tma)
                if cfg["kind"] == "tma_store":
                    rep["sass_ok"] = rep["sass_ok"] and rep["sass"]["UTMASTG"] > 0
                if cfg["CLUSTER"] > 1:
                    rep["sass_ok"] = rep["sass_ok"] and rep["sass"]["UTMALDG_MULTICAST"] > 0
                rep["ok"] = rep["ok"] and rep["sass_ok"]       # e.g. no HGMMA: not the kernel we think
            except Exception as e:
                rep["sass_error"] = repr(e)
        else:
            rep["sass"] = "cuobjdump not on PATH"
    return rep


# --------------------------------------------------------------------------------------------------------
# Step 2: checks, in a child process.
def rms(x):
    return float(x.float().pow(2).mean().sqrt())


def check_one(launcher, M, N, K, grid_cap, progress):
    import torch
    g = torch.Generator(device="cuda").manual_seed(1234 + M + 7 * N + 13 * K)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b_t = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    c = torch.empty(M * N + CANARY, device="cuda", dtype=torch.bfloat16)
    c.view(torch.int16)[: M * N].fill_(0x7FC0)                    # bf16 NaN everywhere C will go
    c.view(torch.int16)[M * N:].fill_(CANARY_BITS)
    run = launcher.bind(a, b_t, c, M, N, K, grid_cap)
    progress(f"launch {M}x{N}x{K} grid={run.grid}")
    run()
    torch.cuda.synchronize()
    out = c[: M * N].view(M, N).float()
    ref = a.float() @ b_t.float().T
    nan = int(torch.isnan(out).sum())
    canary_ok = bool((c.view(torch.int16)[M * N:] == CANARY_BITS).all())
    scale = math.sqrt(K) * rms(a) * rms(b_t)
    diff = (out - ref).abs()
    err = float(torch.nan_to_num(diff, nan=float("inf")).max()) / scale
    ok = nan == 0 and canary_ok and err < ERR_TOL
    return dict(shape=[M, N, K], grid=list(run.grid), grid_cap=grid_cap, err=err, nan=nan,
                canary_ok=canary_ok, ok=ok)


def child_worker(jobs, conn):
    """Runs checks for a list of builds; reports progress so the parent can time out hangs."""
    try:
        import torch
        import cupy as cp
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        props = cp.cuda.runtime.getDeviceProperties(0)
        conn.send(("ready", dict(sms=props["multiProcessorCount"], name=props["name"].decode()
                             if isinstance(props["name"], bytes) else str(props["name"]),
                             cc=[props["major"], props["minor"]],
                             smem_optin=props.get("sharedMemPerBlockOptin"))))
    except Exception as e:
        conn.send(("ready_failed", repr(e)))
        return
    for vid, cfg in jobs:
        conn.send(("start", vid))
        res = dict(ok=False, shapes=[])
        try:
            conn.send(("progress", vid, "compile"))
            launcher = Launcher(cfg)
            shapes = [(M, N, K, None) for (M, N, K) in CHECK_SHAPES]
            if cfg["sched"] != "grid2d":
                shapes.append(CHECK_SHAPE_FEW_BLOCKS)
                if cfg["sched"] == "cluster":
                    shapes.append((2600, 4360, 328, 128))
            for (M, N, K, cap) in shapes:
                r = check_one(launcher, M, N, K, cap, lambda s: conn.send(("progress", vid, s)))
                res["shapes"].append(r)
            res["ok"] = all(r["ok"] for r in res["shapes"])
            conn.send(("done", vid, res))
        except Exception as e:
            res["error"] = f"{type(e).__name__}: {e}"[:800]
            res["traceback"] = traceback.format_exc()[-1500:]
            # any CUDA-side failure may have poisoned this context: stop, let the parent start a new child
            fatal = any(s in repr(e) for s in ("cudaError", "CUDA_ERROR", "CUDADriverError", "CUDA error",
                                              "illegal", "launch failure", "misaligned", "AcceleratorError"))
            if not fatal:                             # a host-side error: is the context still usable?
                try:
                    torch.cuda.synchronize()
                    torch.ones(8, device="cuda").sum().item()
                except Exception:
                    fatal = True
            res["fatal"] = fatal
            conn.send(("done", vid, res))
            if fatal:
                return
    conn.send(("finished", None))


def run_children(jobs):
    """jobs: list of (vid, cfg). Returns ({vid: result}, device info). Messages travel over a Pipe (each
    send is written at once, so nothing is lost when a child is killed or dies)."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    results, info = {}, {}
    pending = list(jobs)
    restarts = 0

    def recv(conn, timeout):
        try:
            if conn.poll(timeout):
                return conn.recv()
        except (EOFError, OSError):
            return ("eof",)
        return None

    while pending and restarts < 12:
        restarts += 1
        parent_end, child_end = ctx.Pipe(duplex=False)
        p = ctx.Process(target=child_worker, args=(pending, child_end), daemon=True)
        p.start()
        child_end.close()
        t0 = time.time()
        ready = False
        while time.time() - t0 < CHILD_READY_S:
            msg = recv(parent_end, 1.0)
            if msg is None:
                if not p.is_alive() and not parent_end.poll(0):
                    break
                continue
            if msg[0] == "ready":
                ready, info = True, msg[1]
            else:
                log("child failed to start:", msg[1:])
            break
        if not ready:
            log("checker child did not become ready; remaining builds unchecked")
            for vid, _ in pending:
                results[vid] = dict(ok=False, error="checker child did not start")
            p.kill()
            p.join(5)
            break
        current, last = None, time.time()
        while True:
            msg = recv(parent_end, 0.5)
            if msg is None or msg[0] == "eof":
                if current is not None and time.time() - last > CHILD_STALL_S:
                    log(f"  {current}: no progress for {CHILD_STALL_S:.0f} s (hang?): killing the child")
                    results[current] = dict(ok=False, error=f"hang: no progress for {CHILD_STALL_S:.0f} s",
                                            hang=True)
                    p.kill()
                    p.join(5)
                    break
                if msg is not None or not p.is_alive():
                    p.join(5)
                    if current is not None:
                        results[current] = dict(ok=False, error=f"checker child died (exit code {p.exitcode})")
                        log(f"  {current}: FAIL (checker child died, exit code {p.exitcode})")
                    break
                continue
            last = time.time()
            if msg[0] == "start":
                current = msg[1]
            elif msg[0] == "done":
                vid, res = msg[1], msg[2]
                results[vid] = res
                worst = max([r["err"] for r in res.get("shapes", [])] or [float("nan")])
                log(f"  {vid}: {'PASS' if res['ok'] else 'FAIL'}  max err {worst:.4g}"
                    + (f"  ({res.get('error')})" if res.get("error") else ""))
                current = None
                if res.get("fatal"):
                    p.join(10)
                    break
            elif msg[0] == "finished":
                p.join(10)
                break
        parent_end.close()
        if p.is_alive():
            p.kill()
            p.join(5)
        pending = [(v, c) for (v, c) in pending if v not in results]
    for vid, _ in pending:
        results.setdefault(vid, dict(ok=False, error="not checked"))
    return results, info


# --------------------------------------------------------------------------------------------------------
# Step 3: timing in this process.
class Timer:
    def __init__(self):
        import torch
        self.torch = torch
        self.flush = torch.empty(120 * 2 ** 20 // 4, device="cuda", dtype=torch.float32).normal_()
        self.sink = torch.empty((), device="cuda", dtype=torch.float32)

    def median_ms(self, fn, reps, warmup=3):
        torch = self.torch
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for e0, e1 in evs:
            self.sink.copy_(self.flush.sum())          # reads 120 MiB: evicts A, B, C from the 60 MiB L2
            e0.record()
            fn()
            e1.record()
        torch.cuda.synchronize()
        ts = sorted(e0.elapsed_time(e1) for e0, e1 in evs)
        return float(np.median(ts)), float(ts[0]), float(ts[-1])


def time_shape(timer, launchers, M, N, K, reps, deadline=None):
    """Times cuBLAS and every launcher on one shape. Returns (cublas dict, {name: dict})."""
    import torch
    import torch.nn.functional as F
    flops = 2.0 * M * N * K
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(M, K, device="cuda", generator=g).to(torch.bfloat16)
    b_t = torch.randn(N, K, device="cuda", generator=g).to(torch.bfloat16)
    ref_f = F.linear(a, b_t).float()

    def cublas():
        F.linear(a, b_t)
    ms, lo, hi = timer.median_ms(cublas, reps)
    cub = dict(ms=ms, min_ms=lo, max_ms=hi, tflops=flops / ms / 1e9)
    scale = math.sqrt(K) * rms(a) * rms(b_t)
    c = torch.empty(M * N + CANARY, device="cuda", dtype=torch.bfloat16)
    out = {}
    for name, (launcher, cap) in launchers.items():
        if deadline is not None and time.time() > deadline:
            out[name] = dict(skipped="time guard")
            continue
        try:
            c.view(torch.int16)[: M * N].fill_(0x7FC0)
            c.view(torch.int16)[M * N:].fill_(CANARY_BITS)
            run = launcher.bind(a, b_t, c, M, N, K, cap)
            ms, lo, hi = timer.median_ms(run, reps)
            err = float((c[: M * N].view(M, N).float() - ref_f).abs().max()) / scale   # NaN if any NaN
            canary_ok = bool((c.view(torch.int16)[M * N:] == CANARY_BITS).all())
            agrees = bool(err < AGREE_TOL and canary_ok)
            out[name] = dict(ms=ms, min_ms=lo, max_ms=hi, tflops=flops / ms / 1e9, grid=list(run.grid),
                             pct_cublas=100.0 * cub["ms"] / ms, pct_roof=100.0 * flops / ms / 1e9 / WGMMA_ROOF_TFLOPS,
                             err_vs_cublas=err if math.isfinite(err) else None, agrees=agrees, canary_ok=canary_ok)
        except Exception as e:
            out[name] = dict(error=f"{type(e).__name__}: {e}"[:500])
            if "CUDA" in repr(e) or "cuda" in repr(e):
                raise
    return cub, out


# --------------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", nargs="?", default=os.environ.get("OUTDIR") or os.environ.get("OUT") or ".")
    ap.add_argument("--rungs", default="", help="comma-separated rung numbers to run (default: all)")
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args()
    outdir = pathlib.Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    only = {r.strip().zfill(2) for r in args.rungs.split(",") if r.strip()}
    rungs = [r for r in RUNGS if not only or r["rung"] in only]
    doc = dict(script=str(pathlib.Path(__file__).name), kernels=str(KDIR), date=datetime.datetime.now().isoformat(),
               host=platform.node(), python=sys.version.split()[0], wgmma_roof_tflops_ref=WGMMA_ROOF_TFLOPS,
               builds=[], timing={}, sweep={}, notes=[])

    def dump():
        (outdir / "gemm-hopper-ladder.json").write_text(json.dumps(doc, indent=1, default=str))

    # ---- step 1: builds, ptxas, SASS
    builds = {}
    work = tempfile.mkdtemp(prefix="gemm07-")
    for r in rungs:
        variants = [dict()] + (SWEEP.get(r["rung"], []) if not args.no_sweep else [])
        for v in variants:
            try:
                cfg = build_config(r, v)
            except Exception as e:
                log(f"{r['file']} {v}: cannot read the kernel: {e}")
                continue
            cfg["base"] = not v
            builds[cfg["name"]] = cfg
    log(f"compiling {len(builds)} builds with NVRTC ...")
    reps = {}
    try:                                          # NVRTC in parallel worker processes (no GPU involved)
        import concurrent.futures as cf
        import multiprocessing as mp
        with cf.ProcessPoolExecutor(max_workers=max(1, min(len(builds), os.cpu_count() or 1, 16)),
                                    mp_context=mp.get_context("spawn")) as ex:
            futs = {n: ex.submit(compile_report, cfg, work) for n, cfg in builds.items()}
            for n, f in futs.items():
                try:
                    reps[n] = f.result(timeout=300)
                except Exception as e:
                    reps[n] = dict(ok=False, pool_error=repr(e))
    except Exception as e:
        log(f"parallel compile unavailable ({e}); compiling one by one")
    for n, cfg in builds.items():
        if n not in reps or "pool_error" in reps[n]:
            try:
                reps[n] = compile_report(cfg, work)
            except Exception as e:
                reps[n] = dict(ok=False, error=repr(e))
    for n, cfg in builds.items():
        rep = cfg["ptxas"] = reps[n]
        cfg["cubin"] = rep.get("cubin")
        sass = rep.get("sass")
        log(f"{cfg['name']:44s} compiled={rep.get('compiled')} regs={rep.get('regs')} "
            f"spills={rep.get('spill_bytes')} smem={cfg['smem']} wgmma-warnings={len(rep.get('wgmma_warnings', []))}"
            + (f" sass={sass}" if isinstance(sass, dict) else ""))
        for w in rep.get("warnings", [])[:5]:
            log("   ptxas:", w)
        if not rep.get("compiled"):
            log("   log:", rep.get("log", "")[-1500:])
    try:
        import cupy
        doc["cupy"] = cupy.__version__
    except Exception:
        pass

    # ---- step 2: checks in children
    jobs = [(n, {k: v for k, v in cfg.items() if k != "ptxas"}) for n, cfg in builds.items() if cfg["ptxas"].get("ok")]
    log(f"checking {len(jobs)} builds in child processes ...")
    results, info = run_children(jobs) if jobs else ({}, {})
    doc["device"] = info
    optin = info.get("smem_optin")
    for n, cfg in builds.items():
        chk = results.get(n, dict(ok=False, error="not checked (compile failed, spills or wgmma warning)"))
        cfg["check"] = chk
        if optin and cfg["smem"] > optin:
            chk.setdefault("note", f"needs {cfg['smem']} B of shared memory, the device allows {optin}")
        doc["builds"].append({k: v for k, v in cfg.items() if k not in ("src",)})
    dump()
    passed = [n for n, cfg in builds.items() if cfg["check"].get("ok")]
    log(f"passed: {len(passed)} of {len(builds)}")
    if not passed:
        log("nothing to time")
        print_table(doc)
        return

    # ---- step 3: timing of the base rungs against cuBLAS
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.cuda.get_device_properties(0)
    doc["device"].update(name=dev.name, sms=dev.multi_processor_count, torch=torch.__version__,
                         cuda_runtime=torch.version.cuda)
    try:
        doc["device"]["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                                 capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        pass
    timer = Timer()
    launchers, occ_caps, loaded = {}, {}, {}
    for n in passed:
        try:
            ln = loaded[n] = Launcher(builds[n])
        except Exception as e:
            log(f"{n}: load failed in the parent: {e}")
            continue
        builds[n]["loaded"] = ln.attributes()
        cap = None
        if builds[n]["sched"] == "cluster":
            nc = ln.resident_clusters()
            builds[n]["resident_clusters"] = nc
            if nc and nc * builds[n]["CLUSTER"] < ln.sms:
                cap = occ_caps[n] = nc * builds[n]["CLUSTER"]
                log(f"{n}: only {nc} clusters fit at once: persistent grid capped at {cap} CTAs")
        if builds[n]["base"] or builds[n]["rung"] < "05":     # 05-07 variants: in the sweep
            launchers[n] = (ln, cap)
    for b in doc["builds"]:
        for k in ("loaded", "resident_clusters"):
            if k in builds.get(b["name"], {}):
                b[k] = builds[b["name"]][k]
    for (M, N, K) in TIME_SHAPES:
        if time.time() - T_START > TOTAL_GUARD_S - 30:
            log(f"skipping {M}x{N}x{K}: time guard")
            doc["notes"].append(f"{M}x{N}x{K} skipped by the time guard")
            continue
        reps = 10 if M * N * K > 8192 ** 3 else 20
        if M * N * K > 8192 ** 3 and "8192x8192x8192" in doc["timing"]:
            prev = doc["timing"]["8192x8192x8192"]
            scale_t = M * N * K / 8192 ** 3
            est = prev["seconds"] * scale_t * (reps + 3) / 23.0
            if est > 60.0:
                log(f"skipping {M}x{N}x{K}: estimated {est:.0f} s > 60 s")
                doc["notes"].append(f"{M}x{N}x{K} skipped: estimated {est:.0f} s")
                continue
        t0 = time.time()
        try:
            cub, res = time_shape(timer, launchers, M, N, K, reps, deadline=T_START + TOTAL_GUARD_S)
            torch.cuda.empty_cache()
        except Exception as e:
            log(f"{M}x{N}x{K}: timing aborted: {e}")
            doc["notes"].append(f"{M}x{N}x{K}: timing aborted: {e}")
            break
        key = f"{M}x{N}x{K}"
        doc["timing"][key] = dict(cublas=cub, kernels=res, reps=reps, seconds=time.time() - t0)
        log(f"{key}: cuBLAS {cub['ms']:.3f} ms {cub['tflops']:.0f} TFLOP/s ({time.time() - t0:.1f} s)")
        for n, r in res.items():
            if "ms" in r:
                log(f"   {n:44s} {r['ms']:8.3f} ms {r['tflops']:6.0f} TFLOP/s {r['pct_cublas']:6.1f}% of cuBLAS"
                    f"  err {r['err_vs_cublas']}{'' if r['agrees'] else '  DISAGREES WITH cuBLAS'}")
            else:
                log(f"   {n:44s} {r}")
        dump()

    # ---- step 4: sweep of the best rung (05-07) at 4096^3 and 8192^3
    if not args.no_sweep:
        t_sweep = time.time()
        key = "8192x8192x8192" if "8192x8192x8192" in doc["timing"] else "4096x4096x4096"
        best_rung, best_t = None, -1.0
        for n, r in doc["timing"].get(key, {}).get("kernels", {}).items():
            if builds[n]["rung"] in ("05", "06", "07") and r.get("agrees") and r["tflops"] > best_t:
                best_rung, best_t = builds[n]["rung"], r["tflops"]
        if best_rung:
            cands = {}
            for n, cfg in builds.items():
                if cfg["rung"] == best_rung and cfg["check"].get("ok"):
                    caps = [None] if cfg["sched"] != "cluster" else sorted(
                        {c for c in list(GRID_CAPS) + [occ_caps.get(n)]}, key=lambda c: -(c or 10 ** 6))
                    for cap in caps:
                        if n in loaded:
                            cands[n + ("" if cap is None else f" grid<={cap}")] = (loaded[n], cap)
            log(f"sweep of rung {best_rung}: {len(cands)} variants")
            for (M, N, K) in TIME_SHAPES[:2]:
                if time.time() - t_sweep > SWEEP_GUARD_S or time.time() - T_START > TOTAL_GUARD_S:
                    doc["notes"].append(f"sweep at {M}x{N}x{K} skipped by the time guard")
                    continue
                try:
                    cub, res = time_shape(timer, cands, M, N, K, 20,
                                          deadline=min(t_sweep + SWEEP_GUARD_S, T_START + TOTAL_GUARD_S))
                    torch.cuda.empty_cache()
                except Exception as e:
                    doc["notes"].append(f"sweep at {M}x{N}x{K} aborted: {e}")
                    break
                skey = f"{M}x{N}x{K}"
                doc["sweep"][skey] = dict(rung=best_rung, cublas=cub, kernels=res)
                log(f"sweep {skey}: cuBLAS {cub['tflops']:.0f} TFLOP/s")
                for n, r in sorted(res.items(), key=lambda kv: -kv[1].get("tflops", 0)):
                    if "ms" in r:
                        log(f"   {n:56s} {r['tflops']:6.0f} TFLOP/s {r['pct_cublas']:6.1f}%"
                            f"{'' if r['agrees'] else '  DISAGREES WITH cuBLAS'}")
                    else:
                        log(f"   {n:56s} {r}")
                dump()
    doc["seconds"] = time.time() - T_START
    dump()
    print_table(doc)


def print_table(doc):
    print("\n== chapter 07 ladder: bf16 GEMM, TFLOP/s (% of cuBLAS in the same run) ==")
    keys = list(doc.get("timing", {}).keys())
    head = f"{'build':44s} {'regs':>4s} {'smem':>7s} {'check':>5s} " + " ".join(f"{k:>22s}" for k in keys)
    print(head)
    row = f"{'cuBLAS (F.linear)':44s} {'':>4s} {'':>7s} {'':>5s} " + " ".join(
        f"{doc['timing'][k]['cublas']['tflops']:>22.0f}" for k in keys)
    print(row)
    for b in doc.get("builds", []):
        if not b.get("base") and not any(b["name"] in doc["timing"][k]["kernels"] for k in keys):
            continue
        cells = []
        for k in keys:
            r = doc["timing"][k]["kernels"].get(b["name"])
            if r and "ms" in r:
                cells.append(f"{r['tflops']:>9.0f} ({r['pct_cublas']:5.1f}%){'' if r['agrees'] else '!'}")
            else:
                cells.append(f"{'-':>22s}")
        chk = b.get("check", {})
        print(f"{b['name']:44s} {str(b['ptxas'].get('regs')):>4s} {b['smem']:>7d} "
              f"{('pass' if chk.get('ok') else 'FAIL'):>5s} " + " ".join(f"{c:>22s}" for c in cells))
    for skey, sw in doc.get("sweep", {}).items():
        best = sorted(((r["tflops"], n) for n, r in sw["kernels"].items() if "ms" in r and r.get("agrees")), reverse=True)
        if best:
            print(f"sweep {skey} (rung {sw['rung']}): best {best[0][1]} {best[0][0]:.0f} TFLOP/s "
                  f"({100 * best[0][0] / sw['cublas']['tflops']:.1f}% of cuBLAS {sw['cublas']['tflops']:.0f})")
    fails = [b for b in doc.get("builds", []) if not b.get("check", {}).get("ok")]
    for b in fails:
        print(f"not timed: {b['name']}: {b.get('check', {}).get('error') or 'check failed'}")
    print(f"total {time.time() - T_START:.0f} s")


if __name__ == "__main__":
    main()
