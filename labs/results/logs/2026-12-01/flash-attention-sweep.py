"""Chapter 08 kernel ladder (FlashAttention forward: fused SIMT, mma.sync, exp2 + conditional rescale,
causal tile skipping, multi-stage K/V pipeline, wide warps of 32 query rows and, on Hopper only, the
wgmma/TMA rung 07) on one GPU: check, time against torch SDPA's back ends and a naive torch attention,
sweep the tile macros of rungs 07, 06 and 05.

Run from anywhere on a GPU machine (cupy, numpy, torch; labkit is not used):

    python3 labs/results/logs/2026-12-01/flash-attention-sweep.py [OUTDIR]

OUTDIR defaults to $OUT, else the current directory; the results go to OUTDIR/flash-attention.json
(rewritten after every phase, so a run cut short still leaves what it measured) and a compact table is
printed last.

Contract of every kernel: Q, K, V, O contiguous bf16 (B, H, S, d), LSE fp32 (B, H, S) natural log,
scale 1/sqrt(d), causal = query i sees keys j <= i; entry(Q, K, V, O, LSE, int S, int causal), grid
(ceil(S / BLOCK_M), B * H), block and dynamic shared memory from the file's launch_config kernel.
Rung 07 (07_wgmma.cu, `// requires: sm_90a`) takes TMA tensor maps of Q, K, V instead of their pointers
(its launch_config says so: out[8] = 1, box rows in out[9], out[10]); this script builds them (ctypes on
libcuda's cuTensorMapEncodeTiled: Q, K, V viewed as (B H S) x d, 128-byte swizzle, boxes of 64 columns),
compiles the file for sm_90a and leaves it out, with a line in the log, on any GPU but compute capability
9.0. FLOPs counted 4 B H S^2 d, halved for causal.
Steps:
 1. every rung (d = 128 and 64) and every sweep variant is compiled with cupy.RawModule ("-std=c++17",
    "-arch=sm_XY" of this GPU, "-I<repo>/kernels", -D macros) and first launched in a spawned child
    process, never in this one, on irregular shapes (S = 1, 17, 129, 1000, 4097; B*H from 1 to 128),
    causal and not: outputs NaN-poisoned between canary regions; O within 2^-8 |ref| + 2^-6 (rms(ref)
    + sd) elementwise of an fp32 reference (softmax(Q K^T scale) V on fp32 copies, TF32 off), LSE within
    1e-3 + 2^-12 |ref| of torch.logsumexp of the fp32 scores. sd, per element of O, is the root of
    sum_j w_ij^2 v_jc^2 (w the fp32 softmax): the scale of the error that rounding each p to bf16
    (relative 2^-8 at most) before P V puts into O, as the mma.sync rungs and every FlashAttention do.
    Without it the bound holds for fp32 P only: in the first rows of a causal head (a handful of keys,
    |O| ~ 1) that rounding moves O by up to ~4e-3, while 2^-6 rms(ref) of a long causal head is ~2e-3
    (rms(ref) ~ 0.1), so correct bf16-P kernels failed at S = 1000 and 4097 (the worst element under
    the rms-only bound is still reported: o_rms_only_*). A fault ends the child (its CUDA context
    is lost) and a fresh child takes the rest; a child silent for 45 s is killed. Meanwhile this process
    compiles the same builds (CPU only; CuPy's cache then serves both);
 2. timings (CUDA events, 2 warm-up runs, L2 flushed by reading a 120 MiB buffer before every run,
    median of 10; the SIMT rung 3 runs) of every rung that passed, of SDPA's FLASH_ATTENTION,
    CUDNN_ATTENTION and EFFICIENT_ATTENTION back ends (a back end that refuses is noted) and of a naive
    torch attention (matmul, softmax, matmul, bf16), at B=16 H=16 S=4096 d=128 and d=64 and at B=1
    H=16 S=16384 d=128, causal and not. Every timed output is compared with SDPA's (flash, else cuDNN,
    else efficient: |o - sdpa| <= 2^-7 |sdpa| + 2^-5 (rms(sdpa) + rms of the row), the row term for
    the bf16-P rounding in either output) and the best rung is checked against fp32 on two heads of
    each timing shape;
 3. the sweep of a few of 07_wgmma.cu's macros (STAGES, BLOCK_N, OVERLAP, CONSUMERS; Hopper only), of
    06_wide_warps.cu's (WARPS, BLOCK_N, SUB_N, STAGES, SWIZZLE, RESCALE_TAU) and a few of
    05_pipelined.cu's (WARPS, BLOCK_N, STAGES) at B=16 H=16 S=4096, d=128 and d=64, causal and not,
    within a guard.
The whole script aims at well under 4 minutes (a global guard of 225 s trims what is left).
FA08_KDIR overrides the kernel folder. FA08_SMOKE=1 runs the script's own logic on the CPU (no cupy,
no torch, no GPU): the kernels are stood in for by a numpy emulation of their contract, shapes shrink,
and every figure it prints means nothing; FA08_SMOKE_FAULT=<label> makes the child die on that build
(to exercise the respawn path).
"""
import argparse
import datetime
import json
import math
import multiprocessing as mp
import os
import pathlib
import sys
import time
import traceback

T0 = time.time()
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[3]
KDIR = pathlib.Path(os.environ.get("FA08_KDIR", ROOT / "kernels" / "08-flash-attention"))
SMOKE = bool(os.environ.get("FA08_SMOKE"))

GLOBAL_GUARD_S = 225.0
SWEEP_GUARD_S = 60.0
CHILD_STALL_S = 45.0
RUNS, SIMT_RUNS, SWEEP_RUNS, WARMUP = 10, 3, 10, 2
FRONT, TAIL = 64, 4096                 # canary elements before and after each output
O_POISON, O_CANARY = -1, 0x7FBF        # int16 views of bf16 NaN patterns
L_POISON, L_CANARY = 0x7FC00001, 0x7FC0BEEF   # int32 views of fp32 NaN patterns
O_REL, O_ABS_RMS = 2.0 ** -8, 2.0 ** -6
O_SD = 2.0 ** -6                       # x sd: the bf16 rounding of P before P V (see step 1 above)
LSE_ABS, LSE_REL = 1e-3, 2.0 ** -12

# (B, H, S) of the correctness shapes; each is run causal and not, for the build's head dim
CHECK_SHAPES = [(1, 1, 1), (1, 2, 17), (2, 3, 129), (1, 4, 1000), (1, 1, 4097), (4, 32, 33), (2, 64, 200)]
# (B, H, S, d, causal) of the timing shapes
TIME_SHAPES = [(16, 16, 4096, 128, False), (16, 16, 4096, 128, True), (16, 16, 4096, 64, False),
               (16, 16, 4096, 64, True), (1, 16, 16384, 128, False), (1, 16, 16384, 128, True)]
SWEEP_SHAPES = [(16, 16, 4096, False), (16, 16, 4096, True)]          # d from the variant
if SMOKE:
    CHECK_SHAPES = [(1, 1, 1), (1, 2, 17), (1, 1, 70)]
    TIME_SHAPES = [(1, 2, 64, 128, False), (1, 2, 64, 128, True), (1, 2, 48, 64, False)]
    SWEEP_SHAPES = [(1, 2, 64, False), (1, 2, 64, True)]

# (label, file, entry point, -D macros): the ladder in order, for each head dim
RUNGS = [
    ("flash_simt", "01_fused_simt.cu", "flash_simt", {}),
    ("flash_mma", "02_mma.cu", "flash_mma", {}),
    ("flash_exp2", "03_exp2.cu", "flash_exp2", {}),
    ("flash_causal_skip", "04_causal_skip.cu", "flash_causal_skip", {}),
    ("flash_pipelined", "05_pipelined.cu", "flash_pipelined", {}),
    ("flash_wide", "06_wide_warps.cu", "flash_wide", {}),
    ("flash_wgmma", "07_wgmma.cu", "flash_wgmma", {}),         # Hopper only (sm_90a)
]
HOPPER_ONLY = ("07_wgmma.cu",)


def label_of(name, defs):
    return name + "[" + ",".join(f"{k}={v}" for k, v in defs.items()) + "]"


LADDER = [(label_of(n, dict(d, HEAD_DIM=hd)), f, e, dict(d, HEAD_DIM=hd))
          for hd in (128, 64) for (n, f, e, d) in RUNGS]

# The sweeps: every configuration compiles for sm_80 and sm_90 with no spills (NVRTC 13.5).
# 06: 32 query rows per warp; SUB_N = keys per softmax step (SUB_N=64 at d=128 spills: not listed).
SWEEP06_DEFS = [
    dict(WARPS=4, BLOCK_N=64, SUB_N=32, STAGES=2), dict(WARPS=4, BLOCK_N=64, SUB_N=32, STAGES=3),
    dict(WARPS=4, BLOCK_N=128, SUB_N=32, STAGES=2), dict(WARPS=4, BLOCK_N=32, SUB_N=32, STAGES=2),
    dict(WARPS=8, BLOCK_N=64, SUB_N=32, STAGES=2), dict(WARPS=8, BLOCK_N=64, SUB_N=32, STAGES=3),
    dict(WARPS=4, BLOCK_N=64, SUB_N=32, STAGES=2, SWIZZLE=0),
    dict(WARPS=4, BLOCK_N=64, SUB_N=32, STAGES=2, RESCALE_TAU="0.0f"),
]
SWEEP06_DEFS = [dict(d, HEAD_DIM=128) for d in SWEEP06_DEFS] + [
    dict(HEAD_DIM=64, WARPS=4, BLOCK_N=128, SUB_N=64, STAGES=2), dict(HEAD_DIM=64, WARPS=4, BLOCK_N=64, SUB_N=64, STAGES=2),
    dict(HEAD_DIM=64, WARPS=8, BLOCK_N=128, SUB_N=64, STAGES=2), dict(HEAD_DIM=64, WARPS=4, BLOCK_N=128, SUB_N=32, STAGES=2),
    dict(HEAD_DIM=64, WARPS=4, BLOCK_N=128, SUB_N=64, STAGES=3),
]
# 05: its default and the best of the 2026-12-01 sweep at each head dim (the rest of that sweep is in
# flash-attention-sweep-2.log)
SWEEP05_DEFS = [
    dict(HEAD_DIM=128, WARPS=8, BLOCK_N=64, STAGES=2), dict(HEAD_DIM=128, WARPS=4, BLOCK_N=64, STAGES=2),
    dict(HEAD_DIM=128, WARPS=4, BLOCK_N=64, STAGES=3), dict(HEAD_DIM=64, WARPS=8, BLOCK_N=128, STAGES=2),
    dict(HEAD_DIM=64, WARPS=4, BLOCK_N=128, STAGES=2),
]
# 07 (Hopper): its defaults are in the ladder; here the ring depth, a wider key tile, the schedule without
# the softmax/PV overlap, and at d=64 three consumer warpgroups and 192-key tiles (all compile for sm_90a
# without spills or serialised wgmma; d=128 with three consumers does not fit and is not listed).
SWEEP07_DEFS = [
    dict(HEAD_DIM=128, STAGES=3), dict(HEAD_DIM=128, BLOCK_N=176), dict(HEAD_DIM=128, OVERLAP=0),
    dict(HEAD_DIM=64, CONSUMERS=3), dict(HEAD_DIM=64, BLOCK_N=192),
]
if SMOKE:
    SWEEP06_DEFS = SWEEP06_DEFS[:2] + SWEEP06_DEFS[-1:]
    SWEEP05_DEFS = SWEEP05_DEFS[:1]
    SWEEP07_DEFS = SWEEP07_DEFS[:1]
SWEEP = ([(label_of("flash_wgmma", d), "07_wgmma.cu", "flash_wgmma", d) for d in SWEEP07_DEFS]
         + [(label_of("flash_wide", d), "06_wide_warps.cu", "flash_wide", d) for d in SWEEP06_DEFS]
         + [(label_of("flash_pipelined", d), "05_pipelined.cu", "flash_pipelined", d) for d in SWEEP05_DEFS])


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def clean(x):
    """JSON-safe: NaN/inf -> None, recursively."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def flops_of(B, H, S, d, causal):
    f = 4.0 * B * H * S * S * d
    return f / 2 if causal else f


# ----------------------------------------------------------------------------------------------------
# The GPU back end (cupy + torch, imported lazily) and its CPU stand-in for FA08_SMOKE
# ----------------------------------------------------------------------------------------------------
class Build:
    """One build of one kernel file: its entry point and its launch configuration (from launch_config)."""

    def __init__(self, label, fname, entry, defs, kern, cfg, regs, local_bytes, compile_s):
        self.label, self.fname, self.entry, self.defs, self.kern = label, fname, entry, dict(defs), kern
        self.BM, self.BN, self.threads, self.smem, self.head_dim, self.stages, self.warps, self.swizzle = cfg[:8]
        # out[8] = 1: the kernel takes tensor maps of Q, K, V (rung 07), boxes of out[9] / out[10] rows
        self.operands, self.q_box, self.kv_box = (list(cfg[8:11]) + [0, 0, 0])[:3]
        self.regs, self.local_bytes, self.compile_s = regs, local_bytes, compile_s

    def config(self):
        return (f"d{self.head_dim} {self.BM}x{self.BN} {self.warps}w {self.threads}t s{self.stages} "
                f"{'swz' if self.swizzle else 'pad'} {self.smem // 1024}KB")

    def info(self):
        return dict(label=self.label, file=self.fname, entry=self.entry, defs=self.defs, config=self.config(),
                    BLOCK_M=self.BM, BLOCK_N=self.BN, threads=self.threads, dynamic_smem=self.smem,
                    head_dim=self.head_dim, stages=self.stages, warps=self.warps, swizzle=self.swizzle,
                    regs=self.regs, local_bytes=self.local_bytes, compile_s=round(self.compile_s, 2))


class GpuBackend:
    def __init__(self):
        import cupy as cp
        import numpy as np
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        torch.cuda.init()
        ptr = torch.cuda.current_stream().cuda_stream
        if ptr:                                  # torch on a non-default stream: make CuPy use it too
            cp.cuda.ExternalStream(ptr).use()
        self.cp, self.np, self.torch = cp, np, torch
        self.cc = cp.cuda.Device().compute_capability
        props = cp.cuda.runtime.getDeviceProperties(0)
        self.sms = props["multiProcessorCount"]
        name = props["name"]
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.meta = dict(name=self.name, sms=self.sms, cc=self.cc, l2_bytes=props.get("l2CacheSize"),
                         clock_khz=props.get("clockRate"), driver=cp.cuda.runtime.driverGetVersion(),
                         runtime=cp.cuda.runtime.runtimeGetVersion())
        self.versions = dict(cupy=cp.__version__, torch=torch.__version__, numpy=np.__version__,
                             python=sys.version.split()[0])
        self._flush = None

    # -- builds and launches
    def build(self, label, fname, entry, defs):
        cp = self.cp
        src = (KDIR / fname).read_text()
        arch = f"sm_{self.cc}"
        if "// requires: sm_90a" in src:
            if str(self.cc) != "90":
                raise RuntimeError(f"{fname} needs compute capability 9.0 (wgmma, TMA, setmaxnreg); this GPU is sm_{self.cc}")
            arch = "sm_90a"
        opts = ("-std=c++17", f"-arch={arch}", f"-I{KDIR.parent}") + tuple(f"-D{k}={v}" for k, v in defs.items())
        t = time.time()
        mod = cp.RawModule(code=src, options=opts)
        kern = mod.get_function(entry)                   # compiles (or loads CuPy's cached cubin)
        compile_s = time.time() - t
        out = cp.zeros(16, dtype=cp.int32)
        mod.get_function("launch_config")((1,), (1,), (out,))
        cfg = [int(x) for x in out.get()]
        if cfg[3] > 0:
            kern.max_dynamic_shared_size_bytes = cfg[3]
        b = Build(label, fname, entry, defs, kern, cfg, int(kern.num_regs), int(kern.local_size_bytes), compile_s)
        b.mod = mod
        return b

    def launcher(self, b, q, k, v, o, lse, B, H, S, causal):
        """A zero-argument function launching the build (arguments checked and packed once)."""
        np = self.np
        if q.shape[-1] != b.head_dim:
            raise ValueError(f"{b.label}: head dim {q.shape[-1]} != HEAD_DIM {b.head_dim}")
        for nm, arr in (("Q", q), ("K", k), ("V", v), ("O", o), ("LSE", lse)):
            if arr.data.ptr % 16:
                raise ValueError(f"{b.label}: {nm} is not 16-byte aligned (contract)")
        grid, block = (-(-S // b.BM), B * H, 1), (b.threads, 1, 1)
        if b.operands == 1:                      # rung 07: tensor maps of Q, K, V, viewed as (B H S) x d
            if B * H * S >= 2 ** 31:
                raise ValueError(f"{b.label}: B H S = {B * H * S} rows: the TMA coordinates are 32-bit signed")
            maps = tuple(make_tmap(x.data.ptr, B * H * S, q.shape[-1], box)
                         for x, box in ((q, b.q_box), (k, b.kv_box), (v, b.kv_box)))
            args = maps + (o, lse, np.int32(S), np.int32(1 if causal else 0))
        else:
            args = (q, k, v, o, lse, np.int32(S), np.int32(1 if causal else 0))
        kern, smem = b.kern, b.smem
        return lambda: kern(grid, block, args, shared_mem=smem)

    # -- data
    def inputs(self, B, H, S, d, seed):
        torch = self.torch
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        return [torch.randn(B, H, S, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3)]

    def as_cupy(self, t):
        """A torch tensor as a CuPy array sharing its memory (bf16 as int16)."""
        torch, cp = self.torch, self.cp
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        try:
            return cp.from_dlpack(t)
        except Exception:
            return cp.asarray(t)

    def reference(self, q, k, v, causal, heads=None):
        """fp32 softmax(Q K^T scale) V, logsumexp of the scaled scores and sd = sqrt(softmax^2 V^2) (the
        scale of the bf16-P rounding error), over (B*H, S, d); heads: the first `heads` (b, h) pairs only.
        Computed head by head in chunks to bound the memory."""
        torch = self.torch
        B, H, S, d = q.shape
        qf, kf, vf = (x.reshape(B * H, S, d) for x in (q, k, v))
        n = B * H if heads is None else min(heads, B * H)
        o = torch.empty(n, S, d, device="cuda", dtype=torch.float32)
        lse = torch.empty(n, S, device="cuda", dtype=torch.float32)
        sd = torch.empty(n, S, d, device="cuda", dtype=torch.float32)
        scale = 1.0 / math.sqrt(d)
        per = max(1, (1 << 28) // (S * S))       # heads per chunk: <= 1 GiB of fp32 scores
        mask = torch.ones(S, S, device="cuda", dtype=torch.bool).triu(1) if causal else None
        for i in range(0, n, per):
            j = min(n, i + per)
            s = torch.matmul(qf[i:j].float(), kf[i:j].float().transpose(1, 2)) * scale
            if causal:
                s.masked_fill_(mask, float("-inf"))
            lse[i:j] = torch.logsumexp(s, dim=-1)
            s = torch.softmax(s, dim=-1)
            o[i:j] = torch.matmul(s, vf[i:j].float())
            sd[i:j] = torch.matmul(s.square_(), vf[i:j].float().square()).sqrt_()
            del s
        return o, lse, sd

    def out_buffers(self, n_o, n_l):
        cp = self.cp
        ob = cp.full(FRONT + n_o + TAIL, O_POISON, dtype=cp.int16)
        ob[:FRONT] = O_CANARY
        ob[FRONT + n_o:] = O_CANARY
        lb = cp.full(FRONT + n_l + TAIL, L_POISON, dtype=cp.int32)
        lb[:FRONT] = L_CANARY
        lb[FRONT + n_l:] = L_CANARY
        return ob, lb

    def views(self, ob, lb, n_o, n_l):
        return ob[FRONT:FRONT + n_o], lb[FRONT:FRONT + n_l].view(self.cp.float32)

    def evaluate(self, ob, lb, shape, ref_o, ref_lse, heads=None, rel=O_REL, abs_rms=O_ABS_RMS, ref_sd=None):
        """Canaries, NaN poison, elementwise bounds on O (and on the LSE when ref_lse is given)."""
        torch = self.torch
        B, H, S, d = shape
        n_o, n_l = B * H * S * d, B * H * S
        canary_ok = (bool((ob[:FRONT] == O_CANARY).all()) and bool((ob[FRONT + n_o:] == O_CANARY).all())
                     and bool((lb[:FRONT] == L_CANARY).all()) and bool((lb[FRONT + n_l:] == L_CANARY).all()))
        nh = B * H if heads is None else min(heads, B * H)
        o = torch.from_dlpack(ob[FRONT:FRONT + n_o]).view(torch.bfloat16).view(B * H, S, d)[:nh].float()
        rms = float(ref_o.pow(2).mean().sqrt())
        diff = (o - ref_o).abs()
        finite = bool(torch.isfinite(o).all())
        o_err = float(torch.nan_to_num(diff, nan=float("inf")).max()) / max(rms, 1e-30)
        diff = torch.nan_to_num(diff, nan=float("inf"))
        strict = ref_o.abs() * rel + abs_rms * rms                      # fp32-P bound
        bound = strict if ref_sd is None else strict + O_SD * ref_sd    # + the bf16 rounding of P
        within = bool((diff <= bound).all())
        r = dict(o_err_rms=o_err, o_finite=finite, o_within=within, canary_ok=canary_ok,
                 o_worst_ratio=float((diff / bound.clamp_min(1e-30)).max()))
        rs = diff / strict.clamp_min(1e-30)
        at = int(rs.argmax())
        r.update(o_rms_only_within=bool((rs <= 1).all()), o_rms_only_worst_ratio=float(rs.reshape(-1)[at]),
                 o_rms_only_worst_at=[at // (S * d), at // d % S, at % d])   # [head, row, column]
        ok = canary_ok and finite and within
        if ref_lse is not None:
            lse = torch.from_dlpack(lb[FRONT:FRONT + n_l].view(self.cp.float32)).view(B * H, S)[:nh]
            ldiff = (lse - ref_lse).abs()
            lfin = bool(torch.isfinite(lse).all())
            lerr = float(torch.nan_to_num(ldiff, nan=float("inf")).max())
            lwithin = bool((ldiff <= LSE_ABS + LSE_REL * ref_lse.abs()).all())
            r.update(lse_err=lerr, lse_finite=lfin, lse_within=lwithin)
            ok = ok and lfin and lwithin
        r["ok"] = ok
        return r

    def out_as_torch(self, ob, shape):
        B, H, S, d = shape
        n_o = B * H * S * d
        return self.torch.from_dlpack(ob[FRONT:FRONT + n_o]).view(self.torch.bfloat16).view(B * H, S, d)

    # -- library baselines
    def sdpa(self, backend, q, k, v, causal):
        """(launch fn, output) for one SDPA back end, or raises if it refuses the problem."""
        torch = self.torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        be = dict(flash=SDPBackend.FLASH_ATTENTION, cudnn=SDPBackend.CUDNN_ATTENTION,
                  efficient=SDPBackend.EFFICIENT_ATTENTION)[backend]
        out = {}

        def fn():
            with sdpa_kernel([be]):
                out["o"] = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fn()
        torch.cuda.synchronize()
        return fn, out

    def naive(self, q, k, v, causal):
        torch = self.torch
        S, d = q.shape[-2], q.shape[-1]
        mask = torch.ones(S, S, device="cuda", dtype=torch.bool).triu(1) if causal else None
        out = {}

        def fn():
            s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
            if causal:
                s.masked_fill_(mask, float("-inf"))
            out["o"] = torch.matmul(torch.softmax(s, dim=-1), v)
        fn()
        torch.cuda.synchronize()
        return fn, out

    def torch_o(self, t):
        B, H, S, d = t.shape
        return t.reshape(B * H, S, d)

    def tensor_compare(self, a, ref, rel=2.0 ** -7, abs_rms=2.0 ** -5):
        """bf16 output a against another bf16 output ref (e.g. SDPA's): max |a - ref| / rms(ref), within
        rel |ref| + abs_rms (rms(ref) + rms of ref's row)? The row term: both outputs carry the bf16-P
        rounding error, whose scale follows the row's own size (large in a causal head's first rows)."""
        a, ref = a.float(), ref.float()
        rms = float(ref.pow(2).mean().sqrt())
        diff = (a - ref).abs()
        err = float(self.torch.nan_to_num(diff, nan=float("inf")).max()) / max(rms, 1e-30)
        row = ref.pow(2).mean(dim=-1, keepdim=True).sqrt()
        return err, bool((diff <= rel * ref.abs() + abs_rms * (rms + row)).all())

    # -- timing
    def flush_l2(self):
        """Read a 120 MiB buffer (twice the H200's L2): evicts the inputs without leaving dirty lines."""
        cp, np = self.cp, self.np
        if self._flush is None:
            src = r'''extern "C" __global__ void l2_flush(const int4* __restrict__ p, long long n, int* sink) {
                int acc = 0;
                for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
                     i += (long long)gridDim.x * blockDim.x) { int4 v = p[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
                if (acc == 0x7123abcd) sink[0] = acc; }'''
            k = cp.RawModule(code=src, options=("-std=c++17",)).get_function("l2_flush")
            n = (120 << 20) // 16
            self._flush = (k, cp.zeros(n * 4, dtype=cp.int32), n, cp.zeros(1, dtype=cp.int32))
        k, buf, n, sink = self._flush
        k((self.sms * 8,), (256,), (buf, np.int64(n), sink))

    def bench(self, fn, runs=RUNS, warmup=WARMUP, flush=True):
        cp = self.cp
        for _ in range(warmup):
            fn()
        evs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(runs)]
        for e0, e1 in evs:
            if flush:
                self.flush_l2()
            e0.record()
            fn()
            e1.record()
        evs[-1][1].synchronize()
        return summarize(sorted(cp.cuda.get_elapsed_time(e0, e1) for e0, e1 in evs))

    def sync(self):
        self.cp.cuda.Device().synchronize()

    def sticky_error(self):
        """True if this process's CUDA context no longer works (after an illegal address, a trap...)."""
        cp = self.cp
        try:
            cp.cuda.Device().synchronize()
            return int(cp.arange(4).sum()) != 6
        except Exception:
            return True

    def free(self):
        self.torch.cuda.empty_cache()
        self.cp.get_default_memory_pool().free_all_blocks()


# TMA tensor maps for rung 07 (ctypes on the driver's cuTensorMapEncodeTiled; no extra package)
TMAP_DT = None


def make_tmap(ptr, rows, cols, box_rows, box_cols=64):
    """The tensor map of a row-major rows x cols bf16 array at device address ptr: 128-byte swizzle, zero
    fill out of bounds, boxes of box_rows x box_cols. Returns a NumPy structured scalar (16 uint64), which
    CuPy copies into the kernel's parameter buffer (`const __grid_constant__ TmaDesc`)."""
    global TMAP_DT
    import ctypes
    import numpy as np
    if TMAP_DT is None:
        TMAP_DT = np.dtype([("w", np.uint64, (16,))])
    if ptr % 16 or (cols * 2) % 16 or box_cols * 2 != 128 or not (1 <= box_rows <= 256):
        raise ValueError(f"tensor map: ptr {ptr:#x}, {cols} columns, box {box_rows} x {box_cols}: not a "
                         "16-byte aligned array with 128-byte rows of boxes")
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuTensorMapEncodeTiled
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    f.restype = ctypes.c_int
    raw = np.zeros(24, dtype=np.uint64)
    skip = (-raw.ctypes.data % 64) // 8                       # CUtensorMap is 64-byte aligned
    rc = f(raw.ctypes.data + 8 * skip, 9, 2, ptr, (ctypes.c_uint64 * 2)(cols, rows), (ctypes.c_uint64 * 1)(cols * 2),
           (ctypes.c_uint32 * 2)(box_cols, box_rows), (ctypes.c_uint32 * 2)(1, 1), 0, 3, 3, 0)
    #      bf16 = 9, rank 2, interleave none, swizzle 128B = 3, L2 promotion 256B = 3, OOB fill none (zeros)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {rc}): {rows} x {cols}, box {box_rows} x {box_cols}")
    out = np.zeros(1, dtype=TMAP_DT)
    out["w"][0] = raw[skip:skip + 16]
    return out[0]


def summarize(ts):
    q = lambda f: ts[min(len(ts) - 1, int(f * (len(ts) - 1) + 0.5))]
    med = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
    return dict(median_ms=med, min_ms=ts[0], max_ms=ts[-1], q1_ms=q(0.25), q3_ms=q(0.75), runs=len(ts))


class SmokeBackend(GpuBackend):
    """CPU stand-in (numpy only) for FA08_SMOKE: same interface, the kernels emulated by their contract in
    numpy (bf16 rounding included), SDPA's back ends by the same emulation except EFFICIENT, which refuses.
    Exercises this script's control flow: child processes, poison and canary checks, JSON, the table."""

    class Arr:                                   # the tiny part of a CuPy array the script uses
        pass

    def __init__(self):
        import numpy as np
        self.np = np
        self.cc, self.sms, self.name = 90, 2, "CPU smoke stand-in"
        self.meta = dict(name=self.name, sms=self.sms, cc=self.cc)
        self.versions = dict(numpy=np.__version__, python=sys.version.split()[0])

    @staticmethod
    def _bf16(x):
        np = __import__("numpy")
        b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)   # round to nearest even
        return b.view(np.float32)

    def _attn(self, q, k, v, causal):
        np = self.np
        B, H, S, d = q.shape
        s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d)
        if causal:
            s = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, s)
        m = s.max(-1, keepdims=True)
        p = np.exp(s - m)
        l = p.sum(-1, keepdims=True)
        return (p / l) @ v, (m + np.log(l))[..., 0]

    def build(self, label, fname, entry, defs):
        if not (KDIR / fname).exists():
            raise FileNotFoundError(KDIR / fname)
        if os.environ.get("FA08_SMOKE_FAULT") == label and mp.current_process().name != "MainProcess":
            os._exit(7)                          # a stand-in for a kernel that kills its process
        hd = int(defs.get("HEAD_DIM", 128))
        warps = int(defs.get("WARPS", 8 if fname.startswith("05") else 4))
        bn = int(defs.get("BLOCK_N", 32 if fname.startswith("01") else
                          (128 if fname.startswith("06") and hd == 64 else 64)))
        bm = 32 if fname.startswith("01") else (32 if fname.startswith("06") else 16) * warps
        if fname.startswith("07"):
            bm, bn, warps = 64 * int(defs.get("CONSUMERS", 2)), int(defs.get("BLOCK_N", 128)), 4 * int(defs.get("CONSUMERS", 2))
        cfg = [bm, bn, 32 * warps, 1024 * 96, hd, int(defs.get("STAGES", 1)), warps, 1]
        np = self.np
        be = self

        def kern(grid, block, args, shared_mem=0):
            q, k, v, o, lse, S, causal = args
            oo, ll = be._attn(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), bool(causal))
            o[:] = be._bf16(oo).reshape(-1).view(np.uint32) >> 16
            lse.view(np.float32)[:] = ll.reshape(-1)
        return Build(label, fname, entry, defs, kern, cfg, 100, 0, 0.0)

    def launcher(self, b, q, k, v, o, lse, B, H, S, causal):
        if q.shape[-1] != b.head_dim:
            raise ValueError(f"{b.label}: head dim {q.shape[-1]} != HEAD_DIM {b.head_dim}")
        return lambda: b.kern(None, None, (q, k, v, o, lse, S, causal))

    def inputs(self, B, H, S, d, seed):
        rng = self.np.random.default_rng(seed)
        return [self._bf16(rng.standard_normal((B, H, S, d))) for _ in range(3)]

    def as_cupy(self, t):
        return t

    def reference(self, q, k, v, causal, heads=None):
        B, H, S, d = q.shape
        np = self.np
        o, lse = self._attn(q, k, v, causal)
        s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d)
        if causal:
            s = np.where(np.triu(np.ones((S, S), bool), 1), -np.inf, s)
        w = np.exp(s - s.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        sd = np.sqrt((w * w) @ (v * v))
        n = B * H if heads is None else min(heads, B * H)
        return o.reshape(B * H, S, d)[:n], lse.reshape(B * H, S)[:n], sd.reshape(B * H, S, d)[:n]

    def out_buffers(self, n_o, n_l):
        np = self.np
        ob = np.full(FRONT + n_o + TAIL, O_POISON & 0xFFFF, dtype=np.uint32)    # low 16 bits: the bf16
        ob[:FRONT] = O_CANARY
        ob[FRONT + n_o:] = O_CANARY
        lb = np.full(FRONT + n_l + TAIL, L_POISON, dtype=np.int32)
        lb[:FRONT] = L_CANARY
        lb[FRONT + n_l:] = L_CANARY
        return ob, lb

    def views(self, ob, lb, n_o, n_l):
        return ob[FRONT:FRONT + n_o], lb[FRONT:FRONT + n_l]

    def out_as_torch(self, ob, shape):
        B, H, S, d = shape
        n_o = B * H * S * d
        return (ob[FRONT:FRONT + n_o] << 16).astype(self.np.uint32).view(self.np.float32).reshape(B * H, S, d)

    def evaluate(self, ob, lb, shape, ref_o, ref_lse, heads=None, rel=O_REL, abs_rms=O_ABS_RMS, ref_sd=None):
        np = self.np
        B, H, S, d = shape
        n_o, n_l = B * H * S * d, B * H * S
        canary_ok = bool((ob[:FRONT] == O_CANARY).all() and (ob[FRONT + n_o:] == O_CANARY).all()
                         and (lb[:FRONT] == L_CANARY).all() and (lb[FRONT + n_l:] == L_CANARY).all())
        nh = B * H if heads is None else min(heads, B * H)
        o = self.out_as_torch(ob, shape)[:nh]
        rms = float(np.sqrt((ref_o ** 2).mean()))
        diff = np.abs(o - ref_o)
        finite = bool(np.isfinite(o).all())
        o_err = float(np.nan_to_num(diff, nan=np.inf).max()) / max(rms, 1e-30)
        diff = np.nan_to_num(diff, nan=np.inf)
        strict = np.abs(ref_o) * rel + abs_rms * rms
        bound = strict if ref_sd is None else strict + O_SD * ref_sd
        within = bool((diff <= bound).all())
        r = dict(o_err_rms=o_err, o_finite=finite, o_within=within, canary_ok=canary_ok,
                 o_worst_ratio=float((diff / np.maximum(bound, 1e-30)).max()))
        rs = diff / np.maximum(strict, 1e-30)
        at = int(rs.argmax())
        r.update(o_rms_only_within=bool((rs <= 1).all()), o_rms_only_worst_ratio=float(rs.reshape(-1)[at]),
                 o_rms_only_worst_at=[at // (S * d), at // d % S, at % d])
        ok = canary_ok and finite and within
        if ref_lse is not None:
            lse = lb[FRONT:FRONT + n_l].view(np.float32).reshape(B * H, S)[:nh]
            ldiff = np.abs(lse - ref_lse)
            lfin = bool(np.isfinite(lse).all())
            lwithin = bool((ldiff <= LSE_ABS + LSE_REL * np.abs(ref_lse)).all())
            r.update(lse_err=float(np.nan_to_num(ldiff, nan=np.inf).max()), lse_finite=lfin, lse_within=lwithin)
            ok = ok and lfin and lwithin
        r["ok"] = ok
        return r

    def sdpa(self, backend, q, k, v, causal):
        if backend == "efficient":
            raise RuntimeError("stand-in: this back end refuses (as a real one may)")
        out = {}

        def fn():
            out["o"] = self._bf16(self._attn(q, k, v, causal)[0])
        fn()
        return fn, out

    naive = lambda self, q, k, v, causal: self.sdpa("naive", q, k, v, causal)

    def torch_o(self, t):
        B, H, S, d = t.shape
        return t.reshape(B * H, S, d)

    def tensor_compare(self, a, ref, rel=2.0 ** -7, abs_rms=2.0 ** -5):
        np = self.np
        rms = float(np.sqrt((ref ** 2).mean()))
        diff = np.abs(a - ref)
        row = np.sqrt((ref ** 2).mean(-1, keepdims=True))
        return float(diff.max()) / max(rms, 1e-30), bool((diff <= rel * np.abs(ref) + abs_rms * (rms + row)).all())

    def bench(self, fn, runs=RUNS, warmup=WARMUP, flush=True):
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return summarize(sorted(ts))

    def sync(self):
        pass

    def sticky_error(self):
        return False

    def free(self):
        pass


_be = []


def backend():
    if not _be:
        _be.append(SmokeBackend() if SMOKE else GpuBackend())
    return _be[0]


# ----------------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------------
class Problem:
    """Fresh random bf16 inputs of one shape; the fp32 reference (all heads, or the first `heads`)."""

    def __init__(self, B, H, S, d, causal, seed, want_ref=True, heads=None):
        be = backend()
        self.shape, self.causal, self.heads = (B, H, S, d), causal, heads
        self.q, self.k, self.v = be.inputs(B, H, S, d, seed)
        self.qc, self.kc, self.vc = (be.as_cupy(x) for x in (self.q, self.k, self.v))
        self.ref_o = self.ref_lse = self.ref_sd = None
        if want_ref:
            self.ref_o, self.ref_lse, self.ref_sd = be.reference(self.q, self.k, self.v, causal, heads)

    def sizes(self):
        B, H, S, d = self.shape
        return B * H * S * d, B * H * S

    def launcher(self, b):
        """(launch fn, O buffer, LSE buffer) for build b on this problem, outputs poisoned."""
        be = backend()
        n_o, n_l = self.sizes()
        ob, lb = be.out_buffers(n_o, n_l)
        ov, lv = be.views(ob, lb, n_o, n_l)
        B, H, S, d = self.shape
        return be.launcher(b, self.qc, self.kc, self.vc, ov, lv, B, H, S, self.causal), ob, lb

    def check(self, b):
        be = backend()
        fn, ob, lb = self.launcher(b)
        fn()
        be.sync()
        r = be.evaluate(ob, lb, self.shape, self.ref_o, self.ref_lse, self.heads, ref_sd=self.ref_sd)
        r.update(shape=list(self.shape), causal=self.causal)
        return r


def check_all(b, problems):
    out = []
    for (B, H, S), causal in [(s, c) for s in CHECK_SHAPES for c in (False, True)]:
        key = (B, H, S, b.head_dim, causal)
        if key not in problems:
            problems[key] = Problem(B, H, S, b.head_dim, causal, seed=1000 + len(problems))
        out.append(problems[key].check(b))
    return out


# ----------------------------------------------------------------------------------------------------
# Step 1: the child process (compile + small-shape checks)
# ----------------------------------------------------------------------------------------------------
def child_main(items, out_path):
    def emit(d):
        with open(out_path, "a") as f:
            f.write(json.dumps(clean(d)) + "\n")
    try:
        be = backend()
    except Exception as e:
        emit(dict(event="fatal", error=repr(e)))
        sys.exit(2)
    problems = {}
    for label, fname, entry, defs in items:
        emit(dict(event="start", label=label))
        rec = dict(event="done", label=label, checks=[])
        try:
            b = be.build(label, fname, entry, defs)
            rec["build"] = b.info()
            rec["checks"] = check_all(b, problems)
            rec["ok"] = all(r["ok"] for r in rec["checks"])
        except Exception as e:
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
            rec["traceback"] = traceback.format_exc()[-3000:]
            if be.sticky_error():
                rec["fault"] = True
                emit(rec)
                sys.exit(3)
        emit(rec)
        if len(problems) > 40:                   # keep the child's memory bounded
            problems.clear()
    sys.exit(0)


def read_lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    except FileNotFoundError:
        pass
    return out


def run_preflight(items, workdir, while_waiting=None):
    """Run `items` through child processes; returns {label: record}. `while_waiting()` is called (and must
    return quickly-ish, True to be called again) while a child runs."""
    ctx = mp.get_context("spawn")
    results, remaining, attempt = {}, list(items), 0
    while remaining and attempt < 6 and time.time() - T0 < GLOBAL_GUARD_S - 60:
        attempt += 1
        path = workdir / f"fa08-preflight-{attempt}.jsonl"
        if path.exists():
            path.unlink()
        p = ctx.Process(target=child_main, args=(remaining, str(path)))
        p.start()
        last_n, last_t, killed = 0, time.time(), False
        more = while_waiting is not None
        while p.is_alive():
            if more:
                more = bool(while_waiting())
            else:
                p.join(0.5)
            n = len(read_lines(path))
            if n != last_n:
                last_n, last_t = n, time.time()
            elif time.time() - last_t > CHILD_STALL_S:
                log(f"preflight child silent for {CHILD_STALL_S:.0f} s: killed")
                p.kill()
                p.join(5)
                killed = True
                break
        p.join(5)
        started = None
        for d in read_lines(path):
            if d.get("event") == "start":
                started = d["label"]
            elif d.get("event") == "done":
                results[d["label"]] = d
                started = None
                st = "ok" if d.get("ok") else ("FAULT" if d.get("fault") else "FAILED")
                b = d.get("build", {})
                worst = max([c.get("o_err_rms") or 0 for c in d.get("checks", [])] + [0])
                lworst = max([c.get("lse_err") or 0 for c in d.get("checks", [])] + [0])
                log(f"preflight {d['label']:52s} {st:6s} regs {b.get('regs')} local {b.get('local_bytes')} "
                    f"smem {b.get('dynamic_smem')} compile {b.get('compile_s')} s  max err O {worst:.2e} rms, "
                    f"LSE {lworst:.1e}" + (f"  {d.get('error', '')[:300]}" if not d.get("ok") else ""))
                if not d.get("ok"):
                    for c in d.get("checks", []):
                        if not c.get("ok"):
                            log(f"    failed: {c}")
                            break
            elif d.get("event") == "fatal":
                log("preflight child could not start:", d.get("error"))
                return results
        if started is not None and started not in results:   # killed or crashed inside this item
            why = (f"no progress for {CHILD_STALL_S:.0f} s (a hang?): killed" if killed
                   else f"child died (exit code {p.exitcode}) while running it")
            results[started] = dict(event="done", label=started, ok=False, fault=True, error=why)
            log(f"preflight {started}: {why}")
        remaining = [it for it in remaining if it[0] not in results]
    for it in remaining:
        results[it[0]] = dict(event="done", label=it[0], ok=False, error="not reached by the preflight")
    return results


# ----------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?", default=os.environ.get("OUT") or ".")
    args = ap.parse_args()
    outdir = pathlib.Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    out_json = outdir / "flash-attention.json"

    be = backend()
    global LADDER, SWEEP
    if str(be.cc) != "90":
        for lst in (LADDER, SWEEP):
            for it in [it for it in lst if it[1] in HOPPER_ONLY]:
                log(f"skip {it[0]}: wgmma, TMA and setmaxnreg need compute capability 9.0 (Hopper); this GPU is sm_{be.cc}")
        LADDER = [it for it in LADDER if it[1] not in HOPPER_ONLY]
        SWEEP = [it for it in SWEEP if it[1] not in HOPPER_ONLY]
    res = dict(
        script="labs/results/logs/2026-12-01/flash-attention-sweep.py", smoke=SMOKE,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=be.meta, versions=be.versions,
        method=dict(runs=RUNS, simt_runs=SIMT_RUNS, sweep_runs=SWEEP_RUNS, warmup=WARMUP,
                    l2_flush="read 120 MiB before every run", flops="4 B H S^2 d, halved for causal",
                    o_bound=f"|o - ref| <= {O_REL} |ref| + {O_ABS_RMS} rms(ref) + {O_SD} sd, sd = sqrt(softmax^2 V^2) "
                            "(bf16 rounding of P), fp32 reference, TF32 off",
                    lse_bound=f"|lse - ref| <= {LSE_ABS} + {LSE_REL} |ref|",
                    timed_vs_sdpa="|o - sdpa| <= 2^-7 |sdpa| + 2^-5 (rms(sdpa) + rms of the row)"),
        preflight={}, baselines=[], ladder=[], checks=[], sweep=[], best=None, errors=[])

    def save():
        try:
            out_json.write_text(json.dumps(clean(res), indent=1))
        except Exception as e:
            log("could not write", out_json, e)

    log(f"{be.name}, {be.sms} SMs, sm_{be.cc}, {be.versions}; kernels from {KDIR}; results to {out_json}")

    def work():
        # ---- step 1: preflight in a child; compile the same builds here meanwhile -----------------------
        builds, todo = {}, list(reversed(LADDER + SWEEP))   # from the far end: the child meets us halfway
        t_pre = time.time()

        def compile_next():
            if not todo or time.time() - T0 > GLOBAL_GUARD_S - 90:
                return False
            item = todo.pop(0)
            try:
                builds[item[0]] = be.build(*item)
            except Exception as e:
                builds[item[0]] = e
            return True

        pre = run_preflight(LADDER + SWEEP, outdir, while_waiting=compile_next)
        res["preflight"] = pre
        n_ok = sum(1 for r in pre.values() if r.get("ok"))
        log(f"preflight done in {time.time() - t_pre:.1f} s: {n_ok} of {len(pre)} builds correct")
        save()

        def get_build(item):
            b = builds.get(item[0])
            if b is None:
                b = builds[item[0]] = be.build(*item)
            if isinstance(b, Exception):
                raise b
            return b

        def passed(label):
            p = pre.get(label, {})
            return bool(p.get("ok")) and not p.get("fault")

        # ---- step 2: baselines and the ladder at the timing shapes --------------------------------------
        for si, (B, H, S, d, causal) in enumerate(TIME_SHAPES):
            if time.time() - T0 > GLOBAL_GUARD_S - 70:
                log("global guard: skipping the rest of the timing shapes")
                break
            key = f"B{B} H{H} S{S} d{d} {'causal' if causal else 'full'}"
            flops = flops_of(B, H, S, d, causal)
            try:
                prob = Problem(B, H, S, d, causal, seed=2000 + si, heads=2)
            except Exception as e:
                res["errors"].append(dict(where=f"inputs {key}", error=repr(e)))
                log(f"inputs {key} FAILED: {e!r}")
                continue
            lib_out = None
            for name in ("flash", "cudnn", "efficient", "naive"):
                rec = dict(kernel=f"sdpa_{name}" if name != "naive" else "naive_torch", shape=key,
                           flops=flops)
                try:
                    fn, out = be.naive(prob.q, prob.k, prob.v, causal) if name == "naive" else \
                        be.sdpa(name, prob.q, prob.k, prob.v, causal)
                    o_lib = be.torch_o(out["o"])
                    err, _ = be.tensor_compare(o_lib[:2], prob.ref_o)
                    rec["err_vs_fp32"] = err
                    if lib_out is None and name != "naive":
                        lib_out = (name, o_lib.clone() if hasattr(o_lib, "clone") else o_lib.copy())
                    del out["o"], o_lib
                    t = be.bench(fn)
                    rec.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
                    log(f"{rec['kernel']:52s} {key}: {t['median_ms']:8.3f} ms {rec['tflops']:6.1f} TFLOP/s"
                        f"  err {err:.2e} rms")
                except Exception as e:
                    rec["refused"] = f"{type(e).__name__}: {e}"[:500]
                    log(f"{rec['kernel']:52s} {key}: refused/failed: {rec['refused'][:200]}")
                    if not SMOKE and be.sticky_error():
                        raise
                res["baselines"].append(rec)
                be.free()
            flash = next((r for r in res["baselines"] if r["shape"] == key and r["kernel"] == "sdpa_flash"
                          and "tflops" in r), None)
            for label, fname, entry, defs in LADDER:
                if int(defs["HEAD_DIM"]) != d:
                    continue
                if not passed(label):
                    log(f"skip {label} at {key}: {pre.get(label, {}).get('error', 'failed the preflight')[:200]}")
                    continue
                rec = dict(kernel=label, file=fname, shape=key, flops=flops, causal=causal)
                try:
                    b = get_build((label, fname, entry, defs))
                    rec.update(config=b.config(), regs=b.regs, local_bytes=b.local_bytes)
                    simt = fname.startswith("01")
                    if simt and S > 4096:
                        rec["skipped"] = "SIMT rung timed at S = 4096 only"
                        res["ladder"].append(rec)
                        continue
                    fn, ob, lb = prob.launcher(b)
                    t = be.bench(fn, runs=SIMT_RUNS if simt else RUNS, warmup=1 if simt else WARMUP)
                    rec.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
                    if flash:
                        rec["x_flash"] = rec["tflops"] / flash["tflops"]
                    chk = be.evaluate(ob, lb, prob.shape, prob.ref_o, prob.ref_lse, heads=2, ref_sd=prob.ref_sd)
                    rec.update(err_fp32_2heads=chk["o_err_rms"], lse_err_2heads=chk.get("lse_err"),
                               ok=chk["ok"])
                    res["checks"].append(dict(kernel=label, shape=key, heads=2, **chk))
                    if lib_out is not None:
                        err, within = be.tensor_compare(be.out_as_torch(ob, prob.shape), lib_out[1])
                        rec.update(vs_sdpa=lib_out[0], vs_sdpa_err=err, vs_sdpa_ok=within)
                        rec["ok"] = rec["ok"] and within
                    del ob, lb
                    log(f"{label:52s} {key}: {t['median_ms']:8.3f} ms {rec['tflops']:6.1f} TFLOP/s"
                        + (f" {rec['x_flash']:5.2f}x flash" if flash else "")
                        + f"  {'ok' if rec['ok'] else 'WRONG'} (fp32 {chk['o_err_rms']:.1e}"
                        + (f", vs sdpa {rec['vs_sdpa_err']:.1e})" if lib_out else ")"))
                except Exception as e:
                    rec["error"] = repr(e)[:1000]
                    log(f"{label} {key} FAILED: {e!r}"[:400])
                    if be.sticky_error():
                        res["errors"].append(dict(where=f"{label} {key}", error="CUDA context lost"))
                        res["ladder"].append(rec)
                        save()
                        raise
                res["ladder"].append(rec)
            prob = lib_out = None
            be.free()
            save()

        # ---- step 3: the sweeps of rungs 07, 06 and 05 ------------------------------------------------------
        t_sweep = time.time()
        probs = {}
        for i, item in enumerate(SWEEP):
            label, fname, entry, defs = item
            if time.time() - t_sweep > SWEEP_GUARD_S or time.time() - T0 > GLOBAL_GUARD_S - 10:
                log(f"sweep guard reached after {i} of {len(SWEEP)} configurations")
                res["sweep_cut_after"] = i
                break
            if not passed(label):
                res["sweep"].append(dict(kernel=label, defs=defs, error=pre.get(label, {}).get("error", "failed")))
                log(f"[sweep {i + 1:2d}/{len(SWEEP)}] {label}: not timed (preflight failed)")
                continue
            d = int(defs["HEAD_DIM"])
            for (B, H, S, causal) in SWEEP_SHAPES:
                key = f"B{B} H{H} S{S} d{d} {'causal' if causal else 'full'}"
                flops = flops_of(B, H, S, d, causal)
                rec = dict(kernel=label, defs=defs, shape=key, flops=flops, causal=causal)
                try:
                    pk = (B, H, S, d, causal)
                    if pk not in probs:
                        probs.clear()
                        be.free()
                        probs[pk] = Problem(B, H, S, d, causal, seed=3000 + len(res["sweep"]), heads=2)
                    prob = probs[pk]
                    b = get_build(item)
                    rec.update(config=b.config(), regs=b.regs, local_bytes=b.local_bytes)
                    fn, ob, lb = prob.launcher(b)
                    t = be.bench(fn, runs=SWEEP_RUNS)
                    rec.update(t, tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
                    chk = be.evaluate(ob, lb, prob.shape, prob.ref_o, prob.ref_lse, heads=2, ref_sd=prob.ref_sd)
                    rec.update(err_fp32_2heads=chk["o_err_rms"], ok=chk["ok"])
                    flash = next((r for r in res["baselines"] if r["shape"] == key and r["kernel"] == "sdpa_flash"
                                  and "tflops" in r), None)
                    if flash:
                        rec["x_flash"] = rec["tflops"] / flash["tflops"]
                    del ob, lb
                    log(f"[sweep {i + 1:2d}/{len(SWEEP)}] {sweep_tag(dict(rec, kernel=label))[:52]:52s} {key}: regs {b.regs} "
                        f"{t['median_ms']:7.3f} ms {rec['tflops']:6.1f} TFLOP/s"
                        + (f" {rec['x_flash']:5.2f}x flash" if flash else "") + f" {'ok' if rec['ok'] else 'WRONG'}")
                except Exception as e:
                    rec["error"] = repr(e)[:1000]
                    log(f"[sweep {i + 1:2d}/{len(SWEEP)}] {label} {key} FAILED: {e!r}"[:400])
                    if be.sticky_error():
                        res["errors"].append(dict(where=label, error="CUDA context lost"))
                        res["sweep"].append(rec)
                        save()
                        raise
                res["sweep"].append(rec)
            save()
        probs.clear()

        # the best correct, spill-free configuration per sweep shape
        best = {}
        for r in res["sweep"]:
            if r.get("ok") and r.get("tflops") and not r.get("local_bytes"):
                if r["shape"] not in best or r["tflops"] > best[r["shape"]]["tflops"]:
                    best[r["shape"]] = dict(kernel=r["kernel"], config=sweep_tag(r), tflops=r["tflops"],
                                            median_ms=r["median_ms"], x_flash=r.get("x_flash"))
        res["best"] = best
        save()

    try:
        work()
    except Exception as e:
        res["errors"].append(dict(where="main", error=repr(e), traceback=traceback.format_exc()[-3000:]))
        log("run stopped early:", repr(e))
        traceback.print_exc()
    finally:
        save()
        print_table(res, out_json)


def sweep_tag(r):
    """Rung, geometry and the macros the geometry does not show (SUB_N, RESCALE_TAU) of a sweep record."""
    d = r.get("defs") or {}
    extra = "".join(f" {k.lower()}={d[k]}" for k in ("SUB_N", "RESCALE_TAU") if k in d)
    return f"{r['kernel'].split('[')[0].replace('flash_', '')} {r.get('config') or ''}{extra}"


def print_table(res, out_json):
    f = lambda x, fmt: (fmt.format(x) if x is not None else "-")
    print()
    print("preflight (irregular shapes, causal and not, O and LSE against fp32):")
    for lab, r in res["preflight"].items():
        b = r.get("build", {})
        worst = max([c.get("o_err_rms") or 0 for c in r.get("checks", [])] + [0])
        lworst = max([c.get("lse_err") or 0 for c in r.get("checks", [])] + [0])
        print(f"  {lab[:60]:60s} {'ok' if r.get('ok') else 'FAIL'}  regs {f(b.get('regs'), '{}'):>4s} "
              f"local {f(b.get('local_bytes'), '{}'):>3s}  O {worst:.1e}  LSE {lworst:.1e}"
              + ("" if r.get("ok") else f"  {r.get('error', '')[:60]}"))
    print()
    print(f"{'kernel':52s} {'shape':26s} {'ms':>8s} {'TFLOP/s':>8s} {'x flash':>8s} {'err':>8s} ok")
    rows = [(r["kernel"], r["shape"], r.get("median_ms"), r.get("tflops"), None, r.get("err_vs_fp32"),
             "refused" if "refused" in r else "yes") for r in res["baselines"]]
    rows += [(r["kernel"], r["shape"], r.get("median_ms"), r.get("tflops"), r.get("x_flash"),
              r.get("err_fp32_2heads"), r.get("skipped", "yes" if r.get("ok") else "NO")) for r in res["ladder"]]
    rows.sort(key=lambda x: x[1])
    for k, shp, ms, tf, xf, err, ok in rows:
        print(f"{k[:52]:52s} {shp:26s} {f(ms, '{:8.3f}'):>8s} {f(tf, '{:8.1f}'):>8s} {f(xf, '{:7.2f}x'):>8s} "
              f"{f(err, '{:8.1e}'):>8s} {ok}")
    if res["sweep"]:
        print("\nsweep of rungs 07 (wgmma), 06 (wide) and 05 (pipelined):")
        for r in sorted([r for r in res["sweep"] if r.get("tflops")], key=lambda r: (r["shape"], -r["tflops"])):
            print(f"  {sweep_tag(r)[:58]:58s} {r['shape']:26s} {r['median_ms']:8.3f} ms {r['tflops']:7.1f} "
                  f"{f(r.get('x_flash'), '{:6.2f}x'):>7s} regs {r.get('regs')} {'ok' if r.get('ok') else 'WRONG'}")
        for r in res["sweep"]:
            if not r.get("tflops"):
                print(f"  FAILED {r['kernel'][:70]}: {str(r.get('error'))[:80]}")
    for shp, b in (res.get("best") or {}).items():
        print(f"best at {shp}: {b['config']}: {b['tflops']:.1f} TFLOP/s, {f(b.get('x_flash'), '{:.2f}')}x flash")
    print(f"\n{len(res['errors'])} errors; wrote {out_json}; total {time.time() - T0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
