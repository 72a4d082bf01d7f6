"""Chapter 09 kernel ladder (decode attention over a KV cache: one block per (sequence, KV head) with the
GQA group packed in the block, split-KV with a merge, a paged cache through a cp.async ring, the group as
the M dimension of mma.sync, the merge inside the split kernel) on one GPU: check, time against a
same-size copy and torch SDPA, sweep.

Run from anywhere on a GPU machine (cupy, numpy, torch; labkit is not used):

    python3 labs/results/logs/2026-12-01/decode-attention-sweep.py [OUTDIR]            # everything, < 4 min
    python3 labs/results/logs/2026-12-01/decode-attention-sweep.py --batch1 [OUTDIR]   # rung 05, ~1.5 min

OUTDIR defaults to $OUT, else the current directory; the results go to OUTDIR/decode-attention.json
(--batch1: OUTDIR/decode-attention-batch1.json), rewritten after every phase, so a run cut short still
leaves what it measured; a compact table is printed last.

--batch1: the batch-1 fixed costs. Step 1 as below for rung 05 (every G, D; its STAGES / WARPS / WKEYS
variants; BT_PAGES=64, whose table window moves along the long check splits; each check launched twice
into re-poisoned outputs: the second must give the same bits and leave the counters zero) and for rung
04 (G=8, D=128: the default and WARPS=8 STAGES=3, its best build at batch 1). Then at batch 1, pages
of 16 and 64, and batch 64, pages of 16: the copy, SDPA (default dispatch, contiguous), rung 04 at
NSPLIT 16/32/64 (batch 64: 1/2), its split kernel alone at its best NSPLIT (no decode_merge: what the
merge launch costs; the output is not checked), rung 05 at NSPLIT 16/32/33/64 (batch 64: 1/2) and its
variants at 32 and 33 (batch 64: 1); last, the fastest of each and the time 85% of copy needs.

Contract of every kernel (see each file's header): q, out bf16 (B, Hq, D); lse fp32 (B, Hq) natural log;
seq_lens int32 (B); Hq = G Hkv, query head h reads KV head h // G; scale 1/sqrt(D). Contiguous cache
(rungs 01, 02): K, V bf16 (B, Hkv, Smax, D). Paged cache (03-05): K, V pages (num_pages, Hkv, P, D),
block table int32 (B, max_pages), P = 2^pshift. Split rungs: workspace ws_o fp32 (B, Hq, nsplit, D),
ws_lse fp32 (B, Hq, nsplit), decode_merge when nsplit > 1; rung 05 merges in the split kernel and takes
counters int32 (B, Hkv), zeroed once here, which every launch must leave zero (checked with the canaries).
Geometry from each file's launch_config.
Steps:
 1. every rung at G = 1, 4, 8 and D = 128, 64 (and the sweep variants) is compiled with cupy.RawModule
    ("-std=c++17", "-arch=sm_XY", "-I<repo>/kernels", -D macros) and first launched in a spawned child
    process, never in this one, on irregular cases: lengths 1, 7, 4097, mixed lengths in one batch (0, 1,
    7, 16, 33, 300, 1000, 2049, 4097), pages 16, 64, 256, block tables with holes (spare pages, -1 past
    the end) and shuffled pages, nsplit 1, 3, 16. Cache rows past each length and unused pages hold NaN
    (a kernel that reads them fails); out, lse and the workspace are NaN-poisoned between canary
    regions. Reference: fp64 numpy softmax(q K^T / sqrt D) V per query head with the GQA mapping; each
    element of o within 2^-8 |ref| + 2^-6 rms(row of ref) + 2^-6 sd (sd = sqrt(sum_j w_j^2 v_j^2): the
    scale of the error of rounding p to bf16 before P V, as rung 04 does), lse within 1e-3 + 2^-12 |ref|
    (an empty sequence: o = 0 and lse = -inf exactly). A fault ends the child and a fresh one takes the
    rest; a child silent for 45 s is killed. Meanwhile this process compiles the same builds;
 2. timing at batch 1 and 64, Hq = 32, Hkv = 4 (G = 8), D = 128, context 32768 (every sequence full),
    pages of 16 (then 64 and 256 for the paged rungs): CUDA events, 2 warm-up runs, the L2 flushed by
    reading a 120 MiB buffer before every run, median of 10. Against (c) a cupy copy of the same KV
    bytes (one buffer holding K and V; copy GB/s counts read + write; a kernel's GB/s counts the KV
    bytes it reads; "% copy" = kernel GB/s / copy GB/s), (a) torch SDPA on the contiguous cache, q as
    (B, Hq, 1, D), enable_gqa=True: the default dispatch (its back end named from the profiler's kernel
    names) and each back end forced, a refusal noted, (b) SDPA after gathering the pages into a contiguous
    (B, Hkv, S, D) tensor (pool[block_table].permute(...).reshape(...), timed with the gather). Every
    rung at the NSPLIT values of its batch; each timed output checked against the fp64 reference on the
    first and the last sequence; a time below the datasheet floor (bytes / 4.8 TB/s) is flagged;
 3. a small sweep of warps, stages and keys per warp (and NSPLIT around the best) within a guard.
The whole script aims at well under 4 minutes (a global guard of 225 s trims what is left).
DEC09_KDIR overrides the kernel folder. DEC09_SMOKE=1 runs the script's own logic on the CPU (numpy
only): the kernels are stood in for by a numpy emulation of their contract (splits, workspace, merge and
block-table reads included), shapes shrink, and every figure it prints means nothing;
DEC09_SMOKE_FAULT=<label> makes the child die on that build (to exercise the respawn path);
DEC09_SMOKE_WRONG=<label> makes that build's stand-in read one row past each sequence's end (NaN there:
the check must fail it).
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
KDIR = pathlib.Path(os.environ.get("DEC09_KDIR", ROOT / "kernels" / "09-decode-attention"))
SMOKE = bool(os.environ.get("DEC09_SMOKE"))

GLOBAL_GUARD_S = 225.0
SWEEP_GUARD_S = 45.0
CHILD_STALL_S = 45.0
RUNS, WARMUP = 10, 2
FRONT, TAIL = 64, 4096                       # canary elements before and after each output
O_POISON, O_CANARY = -1, 0x7FBF              # int16 views of bf16 NaN patterns
F_POISON, F_CANARY = 0x7FC00001, 0x7FC0BEEF  # int32 views of fp32 NaN patterns
BF16_NAN = 0x7FC0
O_REL, O_ROW, O_SD = 2.0 ** -8, 2.0 ** -6, 2.0 ** -6
LSE_ABS, LSE_REL = 1e-3, 2.0 ** -12
HBM_DATASHEET = 4.8e12                       # H200, bytes/s: nothing may beat bytes / this

# (label, file, entry point, kind): kind contig1 = no split, contig = split + merge, paged = split + merge,
# fused = paged split with the merge in the same kernel (counters (B, Hkv) int32, zero at every launch)
RUNGS = [
    ("one_block", "01_one_block_per_head.cu", "decode_one_block", "contig1"),
    ("split_kv", "02_split_kv.cu", "decode_split", "contig"),
    ("paged", "03_paged.cu", "decode_paged", "paged"),
    ("paged_mma", "04_paged_mma.cu", "decode_paged_mma", "paged"),
    ("fused_merge", "05_fused_merge.cu", "decode_fused", "fused"),
]
PAGED_KINDS = ("paged", "fused")             # fused: paged, split, merge in the split kernel, counters
BEST = "paged_mma"
CHECK_GD = [(8, 128), (4, 128), (1, 128), (8, 64), (4, 64), (1, 64)]
# check cases: (sequence lengths, Hkv, page size)
CHECK_CASES = [([1], 2, 16), ([7], 1, 16), ([4097], 2, 64), ([1, 7, 4097, 300], 2, 16),
               ([0, 33, 1000, 16, 2049], 1, 256)]
CHECK_NSPLITS = [1, 3, 16]
HQ, HKV, HD, CTX = 32, 4, 128, 32768
TIME_B = [1, 64]
PAGES = [16, 64, 256]
NSPLITS = {1: [16, 32, 64, 128], 64: [1, 2, 4, 8]}
EXTRA_NSPLITS = {("fused_merge", 1): [33]}   # 33 x 4 KV heads = 132 blocks: one per SM
SWEEP_DEFS = {                                # variants of the G=8, D=128 builds (defaults left out)
    "one_block": [dict(WARPS=2)],
    "split_kv": [dict(WARPS=2), dict(UNROLL=1)],
    "paged": [dict(STAGES=2), dict(STAGES=4), dict(WARPS=8)],
    "paged_mma": [dict(STAGES=2), dict(STAGES=3), dict(STAGES=6), dict(WARPS=2, STAGES=6), dict(WARPS=8, STAGES=2),
                  dict(WARPS=8, STAGES=3), dict(WKEYS=32, STAGES=2), dict(WKEYS=32, STAGES=3)],
    "fused_merge": [dict(STAGES=3), dict(WARPS=8, STAGES=3), dict(WKEYS=32, STAGES=3)],
}
# --batch1: rung 05's variants (timed) and check-only builds, rung 04's builds, NSPLIT per batch
B1_VARIANTS = [dict(STAGES=3), dict(STAGES=6), dict(WARPS=8, STAGES=3), dict(WKEYS=32, STAGES=3)]
B1_CHECK_ONLY = [dict(BT_PAGES=64)]
B1_OLD = [dict(), dict(WARPS=8, STAGES=3)]
B1_NSPLITS = {"old": {1: [16, 32, 64], 64: [1, 2]}, "new": {1: [16, 32, 33, 64], 64: [1, 2]},
              "variant": {1: [32, 33], 64: [1]}}
B1_SHAPES = [(1, 16), (1, 64), (64, 16)]
B1_GUARD_S = 150.0
if SMOKE:
    CHECK_GD = [(8, 128), (1, 64)]
    CHECK_CASES = [([1], 2, 16), ([7, 0, 40], 1, 16), ([97], 2, 64)]
    HQ, HKV, CTX = 16, 2, 512
    TIME_B = [1, 3]
    NSPLITS = {1: [4, 8], 3: [1, 2]}
    SWEEP_DEFS = {"split_kv": [dict(WARPS=2)], "paged_mma": [dict(STAGES=2), dict(WARPS=8, STAGES=3)],
                  "fused_merge": [dict(STAGES=3)]}
    EXTRA_NSPLITS = {("fused_merge", 1): [3]}
    B1_VARIANTS, B1_CHECK_ONLY = [dict(STAGES=3)], [dict(BT_PAGES=64)]
    B1_NSPLITS = {"old": {1: [4, 8], 3: [1, 2]}, "new": {1: [4, 8, 3], 3: [1, 2]}, "variant": {1: [8], 3: [1]}}
    B1_SHAPES = [(1, 16), (1, 64), (3, 16)]


def label_of(name, defs):
    return name + "[" + ",".join(f"{k}={v}" for k, v in defs.items()) + "]"


def item(name, defs):
    r = next(r for r in RUNGS if r[0] == name)
    return (label_of(name, defs), r[1], r[2], r[3], dict(defs))


LADDER = [item(n, dict(GROUP=g, HEAD_DIM=d)) for (g, d) in CHECK_GD for (n, _, _, _) in RUNGS]
DEFAULT = {n: item(n, dict(GROUP=8, HEAD_DIM=128)) for (n, _, _, _) in RUNGS}
SWEEP = [item(n, dict(dict(GROUP=8, HEAD_DIM=128), **d)) for n, ds in SWEEP_DEFS.items() for d in ds]


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def clean(x):
    """JSON-safe: NaN/inf -> None (recursively), numpy scalars -> Python."""
    if hasattr(x, "item") and not isinstance(x, (list, dict, str)):
        try:
            x = x.item()
        except Exception:
            pass
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def ceil_to(x, m):
    return -(-x // m) * m


def summarize(ts):
    ts = sorted(ts)
    q = lambda f: ts[min(len(ts) - 1, int(f * (len(ts) - 1) + 0.5))]
    med = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
    return dict(median_ms=med, min_ms=ts[0], max_ms=ts[-1], q1_ms=q(0.25), q3_ms=q(0.75), runs=len(ts))


# ----------------------------------------------------------------------------------------------------
# Host-side data (numpy): bf16 as uint16 bit patterns, the cases, the fp64 reference
# ----------------------------------------------------------------------------------------------------
def np_():
    import numpy as np
    return np


def to_bf16(x):
    """float array -> uint16 bf16 bits, round to nearest even."""
    np = np_()
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(u):
    np = np_()
    return (np.asarray(u).astype(np.uint32) << 16).view(np.float32)


class HostCase:
    """One check case: q, the contiguous cache (rows past each length NaN), its paged copy (pages
    shuffled, spare pages NaN, -1 in the table past each sequence's pages), lengths."""

    def __init__(self, lens, Hkv, G, D, P, seed):
        np = np_()
        rng = np.random.default_rng(seed)
        self.lens = np.array(lens, dtype=np.int32)
        B, Hq = len(lens), G * Hkv
        Smax = max(lens) + 5
        self.B, self.Hkv, self.Hq, self.G, self.D, self.P, self.Smax = B, Hkv, Hq, G, D, P, Smax
        self.q = to_bf16(rng.standard_normal((B, Hq, D)))
        self.K = to_bf16(rng.standard_normal((B, Hkv, Smax, D)))
        self.V = to_bf16(rng.standard_normal((B, Hkv, Smax, D)))
        for b, n in enumerate(lens):
            self.K[b, :, n:] = BF16_NAN
            self.V[b, :, n:] = BF16_NAN
        npg = [-(-n // P) for n in lens]
        self.max_pages = max(npg) + 1                      # a spare column: -1 everywhere
        used = sum(npg)
        num_pages = used + used // 2 + 3                   # holes: pages no sequence owns
        perm = rng.permutation(num_pages)
        self.bt = np.full((B, self.max_pages), -1, dtype=np.int32)
        self.Kp = np.full((num_pages, Hkv, P, D), BF16_NAN, dtype=np.uint16)
        self.Vp = np.full((num_pages, Hkv, P, D), BF16_NAN, dtype=np.uint16)
        at = 0
        for b, n in enumerate(lens):
            for j in range(npg[b]):
                pg = int(perm[at])
                at += 1
                self.bt[b, j] = pg
                rows = min(P, n - j * P)
                self.Kp[pg, :, :rows] = self.K[b, :, j * P:j * P + rows]
                self.Vp[pg, :, :rows] = self.V[b, :, j * P:j * P + rows]
        self.ref = reference(self.q, self.K, self.V, self.lens, G)


def reference(q, K, V, lens, G, seqs=None):
    """fp64 softmax(q K^T / sqrt D) V, its natural LSE and sd = sqrt(sum w^2 v^2) for the sequences `seqs`
    (all by default): arrays (len(seqs), Hq, D), (len(seqs), Hq), (len(seqs), Hq, D). K, V may hold only
    the listed sequences (then index i of seqs is row i of K)."""
    np = np_()
    B, Hq, D = q.shape
    seqs = list(range(B)) if seqs is None else seqs
    o = np.zeros((len(seqs), Hq, D))
    lse = np.full((len(seqs), Hq), -np.inf)
    sd = np.zeros((len(seqs), Hq, D))
    for i, b in enumerate(seqs):
        n = int(lens[b])
        if n == 0:
            continue
        kb = i if K.shape[0] == len(seqs) and seqs != list(range(B)) else b
        for hk in range(K.shape[1]):
            k = from_bf16(K[kb, hk, :n]).astype(np.float64)
            v = from_bf16(V[kb, hk, :n]).astype(np.float64)
            qq = from_bf16(q[b, hk * G:(hk + 1) * G]).astype(np.float64)
            s = qq @ k.T / math.sqrt(D)
            m = s.max(-1, keepdims=True)
            w = np.exp(s - m)
            l = w.sum(-1, keepdims=True)
            w /= l
            o[i, hk * G:(hk + 1) * G] = w @ v
            lse[i, hk * G:(hk + 1) * G] = (m + np.log(l))[:, 0]
            sd[i, hk * G:(hk + 1) * G] = np.sqrt((w * w) @ (v * v))
    return o, lse, sd


def evaluate(o_bits, lse_f, ref, canary_ok):
    """o_bits (n, Hq, D) uint16, lse_f (n, Hq) fp32 against ref = (o, lse, sd)."""
    np = np_()
    ro, rl, rsd = ref
    o = from_bf16(o_bits).astype(np.float64)
    diff = np.nan_to_num(np.abs(o - ro), nan=np.inf)
    row = np.sqrt((ro ** 2).mean(-1, keepdims=True))
    bound = O_REL * np.abs(ro) + O_ROW * row + O_SD * rsd
    finite = bool(np.isfinite(o).all())
    within = bool((diff <= bound).all())
    worst = float((diff / np.maximum(bound, 1e-30)).max()) if diff.size else 0.0
    err = float((diff / np.maximum(row, 1e-30)).max()) if diff.size else 0.0
    lse = np.asarray(lse_f, dtype=np.float64)
    both_inf = np.isneginf(lse) & np.isneginf(rl)
    with np.errstate(invalid="ignore"):
        ld = np.where(both_inf, 0.0, np.nan_to_num(np.abs(lse - rl), nan=np.inf, posinf=np.inf))
    lwithin = bool((ld <= LSE_ABS + LSE_REL * np.abs(np.where(np.isfinite(rl), rl, 0))).all())
    lerr = float(ld.max()) if ld.size else 0.0
    ok = bool(canary_ok and finite and within and lwithin)
    return dict(ok=ok, canary_ok=bool(canary_ok), o_finite=finite, o_within=within, o_worst_ratio=worst,
                o_err_row_rms=err, lse_within=lwithin, lse_err=lerr)


# ----------------------------------------------------------------------------------------------------
# Builds and the GPU back end (cupy + torch, imported lazily); its CPU stand-in for DEC09_SMOKE
# ----------------------------------------------------------------------------------------------------
class Build:
    def __init__(self, label, fname, entry, kind, defs, kern, merge, cfg, regs, local_bytes, compile_s):
        self.label, self.fname, self.entry, self.kind, self.defs = label, fname, entry, kind, dict(defs)
        self.kern, self.merge = kern, merge
        (self.threads, self.smem, self.head_dim, self.group, self.bk, self.stages, self.warps,
         self.splits, self.merge_threads, self.paged) = cfg[:10]
        self.regs, self.local_bytes, self.compile_s = regs, local_bytes, compile_s

    def config(self):
        return (f"G{self.group} d{self.head_dim} {self.warps}w {self.threads}t bk{self.bk} s{self.stages} "
                f"{self.smem // 1024}KB")

    def info(self):
        return dict(label=self.label, file=self.fname, entry=self.entry, kind=self.kind, defs=self.defs,
                    config=self.config(), threads=self.threads, dynamic_smem=self.smem, head_dim=self.head_dim,
                    group=self.group, keys_per_stage=self.bk, stages=self.stages, warps=self.warps,
                    regs=self.regs, local_bytes=self.local_bytes, compile_s=round(self.compile_s, 2))


class Bufs:
    """Poisoned outputs with canaries: out (bf16 bits), lse, ws_o, ws_lse (fp32 bits); and the counters
    (B, Hkv) int32 of the fused rung, zeroed once: a launch must leave them zero (checked with the canaries)."""

    def __init__(self, be, B, Hq, D, nsplit, Hkv=1):
        self.n_o, self.n_l = B * Hq * D, B * Hq
        self.n_wo, self.n_wl = B * Hq * max(nsplit, 1) * D, B * Hq * max(nsplit, 1)
        self.ob = be.poisoned(self.n_o, 16)
        self.lb = be.poisoned(self.n_l, 32)
        self.wob = be.poisoned(self.n_wo, 32)
        self.wlb = be.poisoned(self.n_wl, 32)
        self.cnt = be.zeros_i32(B * Hkv)

    def repoison(self):
        """out and lse poisoned again (canaries kept): a second launch must write every element again."""
        self.ob[FRONT:FRONT + self.n_o] = O_POISON
        self.lb[FRONT:FRONT + self.n_l] = F_POISON

    def canary_ok(self, be):
        return be.all_zero(self.cnt) and all(be.canaries_intact(buf, n, bits) for buf, n, bits in
                                             ((self.ob, self.n_o, 16), (self.lb, self.n_l, 32),
                                              (self.wob, self.n_wo, 32), (self.wlb, self.n_wl, 32)))


class GpuBackend:
    def __init__(self):
        import cupy as cp
        import numpy as np
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.init()
        ptr = torch.cuda.current_stream().cuda_stream
        if ptr:
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
        self._cp = {}

    # -- builds and launches
    def build(self, label, fname, entry, kind, defs):
        cp = self.cp
        opts = ("-std=c++17", f"-arch=sm_{self.cc}", f"-I{KDIR.parent}") + tuple(f"-D{k}={v}" for k, v in defs.items())
        t = time.time()
        mod = cp.RawModule(code=(KDIR / fname).read_text(), options=opts)
        kern = mod.get_function(entry)
        merge = mod.get_function("decode_merge") if kind in ("contig", "paged") else None
        compile_s = time.time() - t
        out = cp.zeros(16, dtype=cp.int32)
        mod.get_function("launch_config")((1,), (1,), (out,))
        cfg = [int(x) for x in out.get()]
        if cfg[1] > 0:
            kern.max_dynamic_shared_size_bytes = cfg[1]
        b = Build(label, fname, entry, kind, defs, kern, merge, cfg, int(kern.num_regs), int(kern.local_size_bytes),
                  compile_s)
        b.mod = mod
        return b

    def c(self, t):
        """A torch tensor as a CuPy array on the same memory (bf16 as int16); cached by data pointer."""
        key = (t.data_ptr(), t.numel(), str(t.dtype))
        if key not in self._cp:
            x = t.view(self.torch.int16) if t.dtype == self.torch.bfloat16 else t
            self._cp[key] = self.cp.from_dlpack(x.detach())
        return self._cp[key]

    def decode_fn(self, b, prob, bufs, nsplit, split_only=False):
        """A zero-argument launch of build b on prob (nsplit splits; rung 01: 1) into bufs; split_only: the
        split kernel without decode_merge (out and lse left unwritten)."""
        np, c = self.np, self.c
        if prob.D != b.head_dim or prob.G != b.group:
            raise ValueError(f"{b.label}: problem G{prob.G} d{prob.D} != build G{b.group} d{b.head_dim}")
        o, l = bufs.ob[FRONT:FRONT + bufs.n_o], bufs.lb[FRONT:FRONT + bufs.n_l]
        wo, wl = bufs.wob[FRONT:FRONT + bufs.n_wo], bufs.wlb[FRONT:FRONT + bufs.n_wl]
        block = (b.threads, 1, 1)
        i32 = np.int32
        if b.kind == "contig1":
            grid = (prob.Hkv, prob.B, 1)
            args = (c(prob.q), c(prob.K), c(prob.V), c(prob.lens), c(o), c(l), i32(prob.Hkv), i32(prob.Smax))
        elif b.kind == "contig":
            grid = (nsplit, prob.Hkv, prob.B)
            args = (c(prob.q), c(prob.K), c(prob.V), c(prob.lens), c(o), c(l), c(wo), c(wl), i32(prob.Hkv),
                    i32(prob.Smax), i32(nsplit))
        elif b.kind == "fused":
            grid = (nsplit, prob.Hkv, prob.B)
            args = (c(prob.q), c(prob.Kp), c(prob.Vp), c(prob.bt), c(prob.lens), c(o), c(l), c(wo), c(wl),
                    c(bufs.cnt), i32(prob.Hkv), i32(prob.pshift), i32(prob.max_pages), i32(nsplit))
        else:
            grid = (nsplit, prob.Hkv, prob.B)
            args = (c(prob.q), c(prob.Kp), c(prob.Vp), c(prob.bt), c(prob.lens), c(o), c(l), c(wo), c(wl),
                    i32(prob.Hkv), i32(prob.pshift), i32(prob.max_pages), i32(nsplit))
        margs = (c(wo), c(wl), c(o), c(l), i32(nsplit))
        kern, merge, smem, mg, mb = b.kern, b.merge, b.smem, (prob.B * prob.Hq,), (b.merge_threads,)
        if b.kind in ("contig1", "fused") or nsplit == 1 or split_only:
            return lambda: kern(grid, block, args, shared_mem=smem)

        def fn():
            kern(grid, block, args, shared_mem=smem)
            merge(mg, mb, margs)
        return fn

    # -- data
    def dev(self, a):
        """numpy -> device torch tensor (uint16 -> bf16)."""
        torch, np = self.torch, self.np
        if a.dtype == np.uint16:
            return torch.from_numpy(a.view(np.int16).copy()).cuda().view(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(a)).cuda()

    def poisoned(self, n, bits):
        torch = self.torch
        if bits == 16:
            buf = torch.full((FRONT + n + TAIL,), O_POISON, dtype=torch.int16, device="cuda")
            buf[:FRONT] = O_CANARY
            buf[FRONT + n:] = O_CANARY
        else:
            buf = torch.full((FRONT + n + TAIL,), F_POISON, dtype=torch.int32, device="cuda")
            buf[:FRONT] = F_CANARY
            buf[FRONT + n:] = F_CANARY
        return buf

    def canaries_intact(self, buf, n, bits):
        can = O_CANARY if bits == 16 else F_CANARY
        return bool((buf[:FRONT] == can).all()) and bool((buf[FRONT + n:] == can).all())

    def zeros_i32(self, n):
        return self.torch.zeros((n,), dtype=self.torch.int32, device="cuda")

    def all_zero(self, buf):
        return int((buf != 0).sum()) == 0

    def out_host(self, bufs, B, Hq, D, seqs=None):
        np = self.np
        o = bufs.ob[FRONT:FRONT + bufs.n_o].view(B, Hq, D)
        l = bufs.lb[FRONT:FRONT + bufs.n_l].view(self.torch.float32).view(B, Hq)
        if seqs is not None:
            o, l = o[seqs], l[seqs]
        return o.cpu().numpy().view(np.uint16), l.cpu().numpy()

    def timing_problem(self, B, P, reuse=None):
        """Every sequence CTX keys; q, the contiguous K/V (one buffer), the paged pool of page P."""
        torch = self.torch
        p = reuse or TimingProblem(B, HQ, HKV, HD, CTX)
        if reuse is None:
            g = torch.Generator(device="cuda")
            g.manual_seed(9000 + B)
            p.kv = torch.randn(2, B, HKV, CTX, HD, device="cuda", dtype=torch.bfloat16, generator=g)
            p.K, p.V = p.kv[0], p.kv[1]
            p.q = torch.randn(B, HQ, HD, device="cuda", dtype=torch.bfloat16, generator=g)
            p.lens = torch.full((B,), CTX, dtype=torch.int32, device="cuda")
        p.Kp = p.Vp = p.bt = None
        self.free()
        n_b = CTX // P
        num_pages = B * n_b + B * n_b // 16 + 1
        perm = torch.randperm(num_pages, device="cuda")
        bt = perm[:B * n_b].view(B, n_b)
        p.bt = bt.to(torch.int32).contiguous()
        p.P, p.pshift, p.max_pages = P, P.bit_length() - 1, n_b
        for name, src in (("Kp", p.K), ("Vp", p.V)):
            pool = torch.full((num_pages, HKV, P, HD), float("nan"), device="cuda", dtype=torch.bfloat16)
            pool[bt.reshape(-1)] = src.view(B, HKV, n_b, P, HD).permute(0, 2, 1, 3, 4).reshape(-1, HKV, P, HD)
            setattr(p, name, pool)
        self.sync()
        return p

    def host_seqs(self, p, seqs):
        """q, K, V of the listed sequences on the host (uint16 bf16 bits)."""
        np = self.np
        h = lambda t: t.contiguous().view(self.torch.int16).cpu().numpy().view(np.uint16)
        return h(p.q), h(p.K[seqs]), h(p.V[seqs])

    # -- baselines
    def copy_fn(self, p):
        cp = self.cp
        src = self.c(p.kv)
        dst = cp.empty_like(src)
        p.copy_dst = dst
        return lambda: cp.copyto(dst, src)

    def sdpa_fn(self, p, backend, gather=False):
        """(fn, note) for SDPA decode with enable_gqa; backend None = the default dispatch."""
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q4 = p.q.view(p.B, p.Hq, 1, p.D)
        out = {}
        if gather:
            bt = p.bt.long()

            def kv():
                k = p.Kp[bt].permute(0, 2, 1, 3, 4).reshape(p.B, p.Hkv, -1, p.D)
                v = p.Vp[bt].permute(0, 2, 1, 3, 4).reshape(p.B, p.Hkv, -1, p.D)
                return k, v
        else:
            kv = lambda: (p.K, p.V)
        bes = None if backend is None else [dict(flash=SDPBackend.FLASH_ATTENTION, cudnn=SDPBackend.CUDNN_ATTENTION,
                                                  efficient=SDPBackend.EFFICIENT_ATTENTION,
                                                  math=SDPBackend.MATH)[backend]]

        def fn():
            k, v = kv()
            if bes is None:
                out["o"] = F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)
            else:
                with sdpa_kernel(bes):
                    out["o"] = F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)
        fn()
        self.sync()
        return fn, out

    def sdpa_kernels(self, fn):
        """The CUDA kernel names one call of fn launches (to name SDPA's back end)."""
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                self.sync()
            return sorted({e.key for e in prof.key_averages()})[:8]
        except Exception as e:
            return [f"profiler failed: {e!r}"[:200]]

    def sdpa_out_host(self, out, seqs):
        np = self.np
        o = out["o"].view(out["o"].shape[0], -1, out["o"].shape[-1])[seqs]
        return o.contiguous().view(self.torch.int16).cpu().numpy().view(np.uint16)

    # -- timing
    def flush_l2(self):
        """Read a 120 MiB buffer (twice the H200's L2): evicts the inputs, leaves no dirty lines."""
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

    def read_fn(self, p):
        """One launch that reads every KV byte once with 16-byte loads and writes nothing (the L2 flush's
        kernel on the cache): the floor of a single read-only pass over those bytes."""
        np = self.np
        if self._flush is None:
            self.flush_l2()
        k, _, _, sink = self._flush
        src = self.c(p.kv)
        n = src.nbytes // 16
        return lambda: k((self.sms * 8,), (256,), (src, np.int64(n), sink))

    def bench(self, fn, runs=RUNS, warmup=WARMUP):
        cp = self.cp
        for _ in range(warmup):
            fn()
        evs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(runs)]
        for e0, e1 in evs:
            self.flush_l2()
            e0.record()
            fn()
            e1.record()
        evs[-1][1].synchronize()
        return summarize([cp.cuda.get_elapsed_time(e0, e1) for e0, e1 in evs])

    def sync(self):
        self.cp.cuda.Device().synchronize()

    def sticky_error(self):
        cp = self.cp
        try:
            cp.cuda.Device().synchronize()
            return int(cp.arange(4).sum()) != 6
        except Exception:
            return True

    def free(self):
        self._cp.clear()
        self.torch.cuda.empty_cache()
        self.cp.get_default_memory_pool().free_all_blocks()


class TimingProblem:
    def __init__(self, B, Hq, Hkv, D, S):
        self.B, self.Hq, self.Hkv, self.D, self.G, self.Smax = B, Hq, Hkv, D, Hq // Hkv, S
        self.kv_bytes = 2 * B * Hkv * S * D * 2


class DevCase:
    """A HostCase on the device (the arrays the kernels take)."""

    def __init__(self, be, hc):
        self.host = hc
        for k in ("B", "Hkv", "Hq", "G", "D", "P", "Smax", "max_pages"):
            setattr(self, k, getattr(hc, k))
        self.pshift = hc.P.bit_length() - 1
        self.q, self.K, self.V = be.dev(hc.q), be.dev(hc.K), be.dev(hc.V)
        self.Kp, self.Vp, self.bt, self.lens = be.dev(hc.Kp), be.dev(hc.Vp), be.dev(hc.bt), be.dev(hc.lens)


class SmokeBackend(GpuBackend):
    """CPU stand-in (numpy only) for DEC09_SMOKE: same interface; the kernels emulated by their contract
    (per-split partial states into the workspace, the merge reading it back, the paged cache read through
    the block table, bf16 rounding of the output); SDPA's back ends by the same attention except
    'cudnn', which refuses. Exercises the script's control flow: children, poison and canaries, JSON."""

    def __init__(self):
        import numpy as np
        self.np = np
        self.cc, self.sms, self.name = 90, 2, "CPU smoke stand-in"
        self.meta = dict(name=self.name, sms=self.sms, cc=self.cc)
        self.versions = dict(numpy=np.__version__, python=sys.version.split()[0])

    def build(self, label, fname, entry, kind, defs):
        if not (KDIR / fname).exists():
            raise FileNotFoundError(KDIR / fname)
        src = (KDIR / fname).read_text()
        if 'extern "C" __global__' not in src or entry not in src:
            raise RuntimeError(f"{fname}: no entry point {entry}")
        if os.environ.get("DEC09_SMOKE_FAULT") == label and mp.current_process().name != "MainProcess":
            os._exit(7)                          # a stand-in for a kernel that kills its process
        g, d = int(defs.get("GROUP", 8)), int(defs.get("HEAD_DIM", 128))
        w = int(defs.get("WARPS", 4))
        cfg = [32 * w, 1024 * 96 if kind in PAGED_KINDS else 0, d, g, 64, int(defs.get("STAGES", 3)), w, 0,
               0 if kind == "fused" else d, int(kind in PAGED_KINDS)]
        return Build(label, fname, entry, kind, defs, None, None, cfg, 100, 0, 0.0)

    def _states(self, q, K, V, lens, G, b, k0, k1):
        """(o normalised, lse) of keys [k0, k1) of sequence b, every query head; K, V (Hkv, keys, D) f32."""
        np = self.np
        Hq, D = q.shape[1], q.shape[2]
        o = np.zeros((Hq, D), np.float32)
        lse = np.full(Hq, -np.inf, np.float32)
        if k1 <= k0:
            return o, lse
        for h in range(Hq):
            s = (K[h // G, k0:k1] @ q[b, h]) / math.sqrt(D)
            m = s.max()
            w = np.exp(s - m)
            o[h] = (w / w.sum()) @ V[h // G, k0:k1]
            lse[h] = m + np.log(w.sum())
        return o, lse

    def decode_fn(self, b, prob, bufs, nsplit, split_only=False):
        np = self.np
        if prob.D != b.head_dim or prob.G != b.group:
            raise ValueError(f"{b.label}: problem G{prob.G} d{prob.D} != build G{b.group} d{b.head_dim}")
        be = self
        nsplit = 1 if b.kind == "contig1" else nsplit
        extra = 1 if os.environ.get("DEC09_SMOKE_WRONG") == b.label else 0   # reads a row past the end

        def fn():
            q = from_bf16(prob.q)
            lens = prob.lens
            o_all = np.zeros((prob.B, prob.Hq, prob.D), np.float32)
            l_all = np.zeros((prob.B, prob.Hq), np.float32)
            for s_b in range(prob.B):
                n = min(int(lens[s_b]) + extra, prob.Smax)
                if b.kind in PAGED_KINDS:                   # read the pool through the table only
                    K = np.zeros((prob.Hkv, n, prob.D), np.float32)
                    V = np.zeros_like(K)
                    for key0 in range(0, n, prob.P):
                        pg = int(prob.bt[s_b, key0 // prob.P])
                        rows = min(prob.P, n - key0)
                        if pg < 0:                          # a hole: what a stray read would find
                            K[:, key0:key0 + rows] = V[:, key0:key0 + rows] = np.nan
                            continue
                        K[:, key0:key0 + rows] = from_bf16(prob.Kp[pg, :, :rows])
                        V[:, key0:key0 + rows] = from_bf16(prob.Vp[pg, :, :rows])
                else:
                    K, V = from_bf16(prob.K[s_b, :, :n]), from_bf16(prob.V[s_b, :, :n])
                chunk = ceil_to(-(-n // nsplit), 64)         # dec_split_range
                for sp in range(nsplit):
                    k0 = min(n, sp * chunk)
                    k1 = min(n, k0 + chunk)
                    o, l = be._states(q, K, V, lens, prob.G, s_b, k0, k1)
                    if nsplit == 1:
                        o_all[s_b], l_all[s_b] = o, l
                    else:
                        for h in range(prob.Hq):
                            r = (s_b * prob.Hq + h) * nsplit + sp
                            bufs.wob[FRONT + r * prob.D:FRONT + (r + 1) * prob.D] = o[h].view(np.int32)
                            bufs.wlb[FRONT + r] = l[h:h + 1].view(np.int32)[0]
            if nsplit > 1 and split_only:                   # no merge: out and lse stay as they were
                return
            if nsplit > 1:                                  # the merge, from the workspace
                wo = bufs.wob[FRONT:FRONT + bufs.n_wo].view(np.float32).reshape(prob.B, prob.Hq, nsplit, prob.D)
                wl = bufs.wlb[FRONT:FRONT + bufs.n_wl].view(np.float32).reshape(prob.B, prob.Hq, nsplit)
                M = wl.max(-1, keepdims=True)
                Mu = np.where(np.isneginf(M), 0, M)
                w = np.exp(wl - Mu)
                W = w.sum(-1)
                o_all = np.where(W[..., None] > 0, (w[..., None] * wo).sum(-2) / np.maximum(W, 1e-30)[..., None], 0)
                l_all = np.where(W > 0, Mu[..., 0] + np.log(np.maximum(W, 1e-30)), -np.inf)
            bufs.ob[FRONT:FRONT + bufs.n_o] = to_bf16(o_all).reshape(-1).view(np.int16)
            bufs.lb[FRONT:FRONT + bufs.n_l] = l_all.astype(np.float32).reshape(-1).view(np.int32)
        return fn

    def dev(self, a):
        return a

    def poisoned(self, n, bits):
        np = self.np
        if bits == 16:
            buf = np.full(FRONT + n + TAIL, O_POISON, dtype=np.int16)
            buf[:FRONT] = O_CANARY
            buf[FRONT + n:] = O_CANARY
        else:
            buf = np.full(FRONT + n + TAIL, F_POISON, dtype=np.int32)
            buf[:FRONT] = F_CANARY
            buf[FRONT + n:] = F_CANARY
        return buf

    def out_host(self, bufs, B, Hq, D, seqs=None):
        np = self.np
        o = bufs.ob[FRONT:FRONT + bufs.n_o].view(np.uint16).reshape(B, Hq, D)
        l = bufs.lb[FRONT:FRONT + bufs.n_l].view(np.float32).reshape(B, Hq)
        return (o, l) if seqs is None else (o[seqs], l[seqs])

    def timing_problem(self, B, P, reuse=None):
        np = self.np
        p = reuse or TimingProblem(B, HQ, HKV, HD, CTX)
        if reuse is None:
            rng = np.random.default_rng(9000 + B)
            p.kv = to_bf16(rng.standard_normal((2, B, HKV, CTX, HD)))
            p.K, p.V = p.kv[0], p.kv[1]
            p.q = to_bf16(rng.standard_normal((B, HQ, HD)))
            p.lens = np.full(B, CTX, dtype=np.int32)
        n_b = CTX // P
        num_pages = B * n_b + B * n_b // 16 + 1
        perm = np.random.default_rng(P).permutation(num_pages)
        p.bt = perm[:B * n_b].reshape(B, n_b).astype(np.int32)
        p.P, p.pshift, p.max_pages = P, P.bit_length() - 1, n_b
        for name, src in (("Kp", p.K), ("Vp", p.V)):
            pool = np.full((num_pages, HKV, P, HD), BF16_NAN, dtype=np.uint16)
            pool[p.bt.reshape(-1)] = src.reshape(B, HKV, n_b, P, HD).transpose(0, 2, 1, 3, 4).reshape(-1, HKV, P, HD)
            setattr(p, name, pool)
        return p

    def host_seqs(self, p, seqs):
        return p.q, p.K[seqs], p.V[seqs]

    def copy_fn(self, p):
        np = self.np
        dst = np.empty_like(p.kv)
        return lambda: np.copyto(dst, p.kv)

    def read_fn(self, p):
        np = self.np
        return lambda: np.bitwise_xor.reduce(p.kv.reshape(-1).view(np.uint16))

    def sdpa_fn(self, p, backend, gather=False):
        if backend == "cudnn":
            raise RuntimeError("stand-in: this back end refuses (as a real one may)")
        np = self.np
        out = {}

        def fn():
            if gather:
                K = p.Kp[p.bt].transpose(0, 2, 1, 3, 4).reshape(p.B, p.Hkv, -1, p.D)
                V = p.Vp[p.bt].transpose(0, 2, 1, 3, 4).reshape(p.B, p.Hkv, -1, p.D)
            else:
                K, V = p.K, p.V
            o = np.zeros((p.B, p.Hq, p.D), np.float32)
            for b in range(p.B):
                o[b] = self._states(from_bf16(p.q), from_bf16(K[b]), from_bf16(V[b]), p.lens, p.G, b, 0,
                                    int(p.lens[b]))[0]
            out["o"] = to_bf16(o)
        fn()
        return fn, out

    def sdpa_kernels(self, fn):
        return ["stand-in"]

    def sdpa_out_host(self, out, seqs):
        return out["o"][seqs]

    def bench(self, fn, runs=RUNS, warmup=WARMUP):
        ts = []
        for _ in range(min(runs, 3)):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return summarize(ts)

    def sync(self):
        pass

    def sticky_error(self):
        return False

    def free(self):
        pass

    def canaries_intact(self, buf, n, bits):
        can = O_CANARY if bits == 16 else F_CANARY
        return bool((buf[:FRONT] == can).all() and (buf[FRONT + n:] == can).all())

    def zeros_i32(self, n):
        return self.np.zeros(n, dtype=self.np.int32)

    def all_zero(self, buf):
        return int((buf != 0).sum()) == 0


_be = []


def backend():
    if not _be:
        _be.append(SmokeBackend() if SMOKE else GpuBackend())
    return _be[0]


# ----------------------------------------------------------------------------------------------------
# Step 1: checks in a child process
# ----------------------------------------------------------------------------------------------------
def check_build(be, b, cases):
    out = []
    nsplits = [1] if b.kind == "contig1" else CHECK_NSPLITS
    for ci, (lens, Hkv, P) in enumerate(CHECK_CASES):
        key = (ci, b.group, b.head_dim)
        if key not in cases:
            hc = HostCase(lens, Hkv, b.group, b.head_dim, P, seed=100 * ci + 10 * b.group + b.head_dim)
            cases[key] = DevCase(be, hc)
        dc = cases[key]
        for ns in nsplits:
            bufs = Bufs(be, dc.B, dc.Hq, dc.D, ns, dc.Hkv)
            fn = be.decode_fn(b, dc, bufs, ns)
            fn()
            be.sync()
            o, l = be.out_host(bufs, dc.B, dc.Hq, dc.D)
            r = evaluate(o, l, dc.host.ref, bufs.canary_ok(be))
            if b.kind == "fused":                  # again into poisoned outputs: the counters were reset
                bufs.repoison()
                fn()
                be.sync()
                o2, l2 = be.out_host(bufs, dc.B, dc.Hq, dc.D)
                same = o2.tobytes() == o.tobytes() and l2.tobytes() == l.tobytes()
                r["repeat_ok"] = same and bufs.canary_ok(be)
                r["ok"] = r["ok"] and r["repeat_ok"]
            r.update(lens=lens, Hkv=Hkv, page=P, nsplit=ns)
            out.append(r)
    return out


def child_main(items, out_path):
    def emit(d):
        with open(out_path, "a") as f:
            f.write(json.dumps(clean(d)) + "\n")
    try:
        be = backend()
    except Exception as e:
        emit(dict(event="fatal", error=repr(e)))
        sys.exit(2)
    cases = {}
    for label, fname, entry, kind, defs in items:
        emit(dict(event="start", label=label))
        rec = dict(event="done", label=label, checks=[])
        try:
            b = be.build(label, fname, entry, kind, defs)
            rec["build"] = b.info()
            rec["checks"] = check_build(be, b, cases)
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
    """Run `items` through spawned children; returns {label: record}. while_waiting() is called while a
    child runs (True: call it again)."""
    ctx = mp.get_context("spawn")
    results, remaining, attempt = {}, list(items), 0
    while remaining and attempt < 6 and time.time() - T0 < GLOBAL_GUARD_S - 60:
        attempt += 1
        path = workdir / f"dec09-preflight-{attempt}.jsonl"
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
                bi = d.get("build", {})
                worst = max([c.get("o_worst_ratio") or 0 for c in d.get("checks", [])] + [0])
                lworst = max([c.get("lse_err") or 0 for c in d.get("checks", [])] + [0])
                log(f"preflight {d['label']:44s} {st:6s} regs {bi.get('regs')} local {bi.get('local_bytes')} "
                    f"smem {bi.get('dynamic_smem')}  worst O/bound {worst:.2f}, LSE err {lworst:.1e}"
                    + (f"  {d.get('error', '')[:300]}" if not d.get("ok") else ""))
                for c in d.get("checks", []):
                    if not c.get("ok"):
                        log(f"    failed: {c}")
                        break
            elif d.get("event") == "fatal":
                log("preflight child could not start:", d.get("error"))
                return results
        if started is not None and started not in results:
            why = (f"no progress for {CHILD_STALL_S:.0f} s (a hang?): killed" if killed
                   else f"child died (exit code {p.exitcode}) while running it")
            results[started] = dict(event="done", label=started, ok=False, fault=True, error=why)
            log(f"preflight {started}: {why}")
        remaining = [it for it in remaining if it[0] not in results]
    for it in remaining:
        results[it[0]] = dict(event="done", label=it[0], ok=False, error="not reached by the preflight")
    return results


# ----------------------------------------------------------------------------------------------------
# Timing records (both modes)
# ----------------------------------------------------------------------------------------------------
def time_build(be, res, get_build, it, prob, ns, ref, seqs, where, P, split_only=False):
    """One timed record of build `it` on prob at nsplit ns, its output checked on `seqs` (split_only: the split
    kernel alone, its output not checked: ok None)."""
    label, fname = it[0], it[1]
    rec = dict(kernel=label, file=fname, where=where + (" no merge" if split_only else ""), B=prob.B, page=P,
               nsplit=ns, bytes=prob.kv_bytes)
    try:
        b = get_build(it)
        rec.update(config=b.config(), regs=b.regs, local_bytes=b.local_bytes)
        bufs = Bufs(be, prob.B, prob.Hq, prob.D, ns, prob.Hkv)
        fn = be.decode_fn(b, prob, bufs, ns, split_only=split_only)
        t = be.bench(fn)
        ms = t["median_ms"]
        rec.update(t, gbps=prob.kv_bytes / (ms * 1e-3) / 1e9,
                   below_floor=ms * 1e-3 < prob.kv_bytes / HBM_DATASHEET)
        if split_only:
            rec.update(ok=False if rec["below_floor"] else None, split_only=True)
        else:
            o, l = be.out_host(bufs, prob.B, prob.Hq, prob.D, seqs)
            chk = evaluate(o, l, ref, bufs.canary_ok(be))
            rec.update(check=chk, ok=chk["ok"] and not rec["below_floor"])
        del bufs
    except Exception as e:
        rec["error"] = repr(e)[:1000]
        log(f"{rec['kernel']} {where} FAILED: {e!r}"[:400])
        if be.sticky_error():
            res["errors"].append(dict(where=f"{rec['kernel']} {where}", error="CUDA context lost"))
            raise
    return rec


def annotate(rec, base):
    if rec.get("gbps") and base.get("copy_gbps"):
        rec["pct_copy"] = 100.0 * rec["gbps"] / base["copy_gbps"]
    for k in ("sdpa_ms", "gather_ms"):
        if rec.get("median_ms") and base.get(k):
            rec["x_" + k[:-3]] = base[k] / rec["median_ms"]


def show(rec):
    if "median_ms" in rec:
        ok = "unchecked" if rec.get("ok") is None else ("ok" if rec.get("ok") else "WRONG")
        x = lambda k: f"{rec[k]:5.2f}x" if rec.get(k) else "    - "
        log(f"{rec['kernel'][:46]:46s} {rec['where']:14s} ns {rec['nsplit']:3d}: {rec['median_ms']:8.4f} ms "
            f"{rec['gbps']:7.0f} GB/s {rec.get('pct_copy', 0):5.1f}% copy "
            f"{x('x_sdpa')} sdpa {x('x_gather')} gather {ok}")


# ----------------------------------------------------------------------------------------------------
# --batch1: rung 05 against rung 04 where the fixed costs decide
# ----------------------------------------------------------------------------------------------------
def run_batch1(be, res, save, outdir):
    g8 = dict(GROUP=8, HEAD_DIM=128)
    new = [item("fused_merge", dict(GROUP=g, HEAD_DIM=d)) for g, d in CHECK_GD]
    new_default = item("fused_merge", g8)
    variants = [item("fused_merge", dict(g8, **v)) for v in B1_VARIANTS]
    check_only = [item("fused_merge", dict(g8, **v)) for v in B1_CHECK_ONLY]
    old = [item("paged_mma", dict(g8, **v)) for v in B1_OLD]
    items = new + variants + check_only + old
    builds, todo = {}, [it for it in [new_default] + variants + old]

    def compile_next():                      # the timed builds, while the child checks
        if not todo or time.time() - T0 > B1_GUARD_S - 60:
            return False
        it = todo.pop(0)
        try:
            builds[it[0]] = be.build(*it)
        except Exception as e:
            builds[it[0]] = e
        return True

    t_pre = time.time()
    pre = run_preflight(items, outdir, while_waiting=compile_next)
    res["preflight"] = pre
    log(f"preflight done in {time.time() - t_pre:.1f} s: {sum(1 for r in pre.values() if r.get('ok'))} "
        f"of {len(pre)} builds correct")
    save()

    def get_build(it):
        b = builds.get(it[0])
        if b is None:
            b = builds[it[0]] = be.build(*it)
        if isinstance(b, Exception):
            raise b
        return b

    def passed(it):
        p = pre.get(it[0], {})
        if not (p.get("ok") and not p.get("fault")):
            log(f"skip {it[0]}: {p.get('error', 'failed the preflight')[:200]}")
            return False
        return True

    bases = res["bases"] = {}
    prob, res["merge_cost"] = None, []
    for B, P in B1_SHAPES:
        if time.time() - T0 > B1_GUARD_S:
            log(f"guard: B{B} p{P} and what follows skipped")
            break
        try:
            if prob is not None and prob.B == B:
                prob = be.timing_problem(B, P, reuse=prob)
            else:
                prob = None
                be.free()
                prob = be.timing_problem(B, P)
                seqs = sorted({0, B - 1})
                hq, hk, hv = be.host_seqs(prob, seqs)
                ref = reference(hq, hk, hv, [CTX] * B, prob.G, seqs)
                base = bases[B] = dict(B=B, bytes=prob.kv_bytes)
                t = be.bench(be.copy_fn(prob))
                base["copy_gbps"] = 2 * prob.kv_bytes / (t["median_ms"] * 1e-3) / 1e9
                res["baselines"].append(dict(kernel="cupy_copy", B=B, bytes=prob.kv_bytes, gbps=base["copy_gbps"], **t))
                log(f"copy of the KV bytes at B={B}: {t['median_ms']:.4f} ms, {base['copy_gbps']:.0f} GB/s; 85% of "
                    f"copy: {prob.kv_bytes / (0.85 * base['copy_gbps'] * 1e9) * 1e3:.4f} ms")
                t = be.bench(be.read_fn(prob))
                base["read_gbps"] = prob.kv_bytes / (t["median_ms"] * 1e-3) / 1e9
                res["baselines"].append(dict(kernel="read_once", B=B, bytes=prob.kv_bytes, gbps=base["read_gbps"], **t))
                log(f"one read-only pass over the KV bytes at B={B}: {t['median_ms']:.4f} ms, {base['read_gbps']:.0f} "
                    f"GB/s ({100 * base['read_gbps'] / base['copy_gbps']:.0f}% of copy): what a single launch that "
                    f"only reads them needs")
                prob.copy_dst = None
                be.free()
                rec = dict(kernel="sdpa_default", B=B, page=None, bytes=prob.kv_bytes)
                try:
                    fn, out = be.sdpa_fn(prob, None, False)
                    chk = evaluate(be.sdpa_out_host(out, seqs), ref[1].astype("float32"), ref, True)
                    out.clear()
                    t = be.bench(fn)
                    rec.update(t, gbps=prob.kv_bytes / (t["median_ms"] * 1e-3) / 1e9, o_ok=chk["o_within"])
                    if chk["o_within"]:
                        base["sdpa_ms"] = t["median_ms"]
                    log(f"sdpa_default B={B}: {t['median_ms']:.4f} ms {rec['gbps']:.0f} GB/s")
                except Exception as e:
                    rec["refused"] = f"{type(e).__name__}: {e}"[:500]
                    log(f"sdpa_default B={B}: refused/failed: {rec['refused'][:200]}")
                    if be.sticky_error():
                        raise
                res["baselines"].append(rec)
                be.free()
        except Exception as e:
            res["errors"].append(dict(where=f"inputs B{B} p{P}", error=repr(e)))
            log(f"inputs B{B} p{P} FAILED: {e!r}")
            if be.sticky_error():
                raise
            prob = None
            continue
        where = f"B{B} p{P}"

        def timed(it, ns, section, split_only=False):
            rec = time_build(be, res, get_build, it, prob, ns, ref, seqs, where, P, split_only)
            annotate(rec, base)
            show(rec)
            res[section].append(rec)
            return rec

        best_old = None
        for it in old:
            if passed(it):
                for ns in B1_NSPLITS["old"][B]:
                    r = timed(it, ns, "ladder")
                    if r.get("ok") and (best_old is None or r["median_ms"] < best_old[1]["median_ms"]):
                        best_old = (it, r)
        if best_old is not None and best_old[1]["nsplit"] > 1:      # what the second launch costs
            r = timed(best_old[0], best_old[1]["nsplit"], "ladder", split_only=True)
            if r.get("median_ms") and r.get("ok") is None:
                cost = dict(where=where, kernel=best_old[0][0], nsplit=r["nsplit"], total_ms=best_old[1]["median_ms"],
                            split_ms=r["median_ms"], merge_ms=best_old[1]["median_ms"] - r["median_ms"])
                res["merge_cost"].append(cost)
                log(f"merge launch at {where}: {best_old[0][0]} nsplit {r['nsplit']}: {cost['total_ms']:.4f} ms with "
                    f"decode_merge, {cost['split_ms']:.4f} ms without: {cost['merge_ms'] * 1e3:.1f} us")
        if passed(new_default):
            for ns in B1_NSPLITS["new"][B]:
                timed(new_default, ns, "ladder")
        for it in variants:
            if passed(it):
                for ns in B1_NSPLITS["variant"][B]:
                    timed(it, ns, "sweep")
        save()
    prob = None
    be.free()
    best = {}
    for r in res["ladder"] + res["sweep"]:
        if r.get("ok") and r.get("median_ms") and not r.get("local_bytes"):
            k = f"B{r['B']} p{r['page']} {r['kernel'].split('[')[0]}"
            if k not in best or r["median_ms"] < best[k]["median_ms"]:
                best[k] = dict(kernel=r["kernel"], nsplit=r["nsplit"], config=r.get("config"),
                               median_ms=r["median_ms"], gbps=r["gbps"], pct_copy=r.get("pct_copy"),
                               x_sdpa=r.get("x_sdpa"), x_gather=r.get("x_gather"))
    res["best"] = best
    save()


# ----------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir", nargs="?", default=os.environ.get("OUT") or ".")
    ap.add_argument("--batch1", action="store_true", help="rung 05 against rung 04 at batch 1 (~1.5 min)")
    args = ap.parse_args()
    outdir = pathlib.Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    out_json = outdir / ("decode-attention-batch1.json" if args.batch1 else "decode-attention.json")

    be = backend()
    res = dict(
        script="labs/results/logs/2026-12-01/decode-attention-sweep.py", smoke=SMOKE,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=be.meta, versions=be.versions,
        shapes=dict(Hq=HQ, Hkv=HKV, D=HD, context=CTX, batches=TIME_B, pages=PAGES, nsplits=NSPLITS),
        method=dict(runs=RUNS, warmup=WARMUP, l2_flush="read 120 MiB before every run",
                    bytes="KV bytes read: 2 B Hkv S D 2 (q, out, workspace not counted)",
                    copy="cupy.copyto of one buffer holding K and V; its GB/s = 2 x bytes / time",
                    o_bound=f"|o - ref| <= {O_REL} |ref| + {O_ROW} rms(ref row) + {O_SD} sd, fp64 reference",
                    lse_bound=f"|lse - ref| <= {LSE_ABS} + {LSE_REL} |ref|; -inf exactly for empty rows",
                    sdpa="q (B, Hq, 1, D), enable_gqa=True; gather = pool[bt].permute.reshape, timed"),
        preflight={}, baselines=[], ladder=[], sweep=[], best=None, errors=[])

    def save():
        try:
            out_json.write_text(json.dumps(clean(res), indent=1))
        except Exception as e:
            log("could not write", out_json, e)

    log(f"{be.name}, {be.sms} SMs, sm_{be.cc}, {be.versions}; kernels from {KDIR}; results to {out_json}")

    def work():
        # ---- step 1 ---------------------------------------------------------------------------------
        builds, todo = {}, list(reversed(LADDER + SWEEP))
        t_pre = time.time()

        def compile_next():
            if not todo or time.time() - T0 > GLOBAL_GUARD_S - 90:
                return False
            it = todo.pop(0)
            try:
                builds[it[0]] = be.build(*it)
            except Exception as e:
                builds[it[0]] = e
            return True

        pre = run_preflight(LADDER + SWEEP, outdir, while_waiting=compile_next)
        res["preflight"] = pre
        log(f"preflight done in {time.time() - t_pre:.1f} s: {sum(1 for r in pre.values() if r.get('ok'))} "
            f"of {len(pre)} builds correct")
        save()

        def get_build(it):
            b = builds.get(it[0])
            if b is None:
                b = builds[it[0]] = be.build(*it)
            if isinstance(b, Exception):
                raise b
            return b

        def passed(label):
            p = pre.get(label, {})
            return bool(p.get("ok")) and not p.get("fault")

        # ---- step 2 ---------------------------------------------------------------------------------
        def time_rung(it, prob, ns, ref, seqs, where, P):
            return time_build(be, res, get_build, it, prob, ns, ref, seqs, where, P)

        bases = res["bases"] = {}
        for B in TIME_B:
            if time.time() - T0 > GLOBAL_GUARD_S - 60:
                log("global guard: skipping the rest of the batches")
                break
            prob = None
            try:
                prob = be.timing_problem(B, PAGES[0])
                seqs = sorted({0, B - 1})
                hq, hk, hv = be.host_seqs(prob, seqs)
                ref = reference(hq, hk, hv, [CTX] * B, prob.G, seqs)
            except Exception as e:
                res["errors"].append(dict(where=f"inputs B{B}", error=repr(e)))
                log(f"inputs B{B} FAILED: {e!r}")
                be.free()
                continue
            base = bases[B] = dict(B=B, bytes=prob.kv_bytes)
            # (c) the copy ceiling
            try:
                t = be.bench(be.copy_fn(prob))
                base["copy_gbps"] = 2 * prob.kv_bytes / (t["median_ms"] * 1e-3) / 1e9
                res["baselines"].append(dict(kernel="cupy_copy", B=B, bytes=prob.kv_bytes, gbps=base["copy_gbps"], **t))
                log(f"copy of the KV bytes at B={B}: {t['median_ms']:.4f} ms, {base['copy_gbps']:.0f} GB/s")
                prob.copy_dst = None
                be.free()
            except Exception as e:
                res["errors"].append(dict(where=f"copy B{B}", error=repr(e)))
            # (a) SDPA on the contiguous cache, (b) SDPA over gathered pages
            for name, gather in ((None, False), ("flash", False), ("efficient", False), ("cudnn", False),
                                 (None, True)):
                kname = "sdpa_" + (name or "default") + ("_gather_p%d" % PAGES[0] if gather else "")
                rec = dict(kernel=kname, B=B, page=PAGES[0] if gather else None, bytes=prob.kv_bytes)
                try:
                    fn, out = be.sdpa_fn(prob, name, gather)
                    chk = evaluate(be.sdpa_out_host(out, seqs), ref[1].astype("float32"), ref, True)
                    rec.update(err_row_rms=chk["o_err_row_rms"], o_ok=chk["o_within"])
                    out.clear()
                    if name is None and not gather:
                        rec["kernels"] = be.sdpa_kernels(fn)
                    t = be.bench(fn)
                    rec.update(t, gbps=prob.kv_bytes / (t["median_ms"] * 1e-3) / 1e9)
                    log(f"{kname:28s} B={B}: {t['median_ms']:8.4f} ms {rec['gbps']:7.0f} GB/s  "
                        f"err {chk['o_err_row_rms']:.1e} {rec.get('kernels', '')}"[:300])
                except Exception as e:
                    rec["refused"] = f"{type(e).__name__}: {e}"[:500]
                    log(f"{kname:28s} B={B}: refused/failed: {rec['refused'][:200]}")
                    if be.sticky_error():
                        raise
                res["baselines"].append(rec)
                be.free()
            ok_sdpa = [r for r in res["baselines"] if r["B"] == B and r["kernel"].startswith("sdpa_")
                       and "gather" not in r["kernel"] and r.get("median_ms") and r.get("o_ok")]
            if ok_sdpa:
                bst = min(ok_sdpa, key=lambda r: r["median_ms"])
                base.update(sdpa_ms=bst["median_ms"], sdpa_kernel=bst["kernel"])
            g = next((r for r in res["baselines"] if r["B"] == B and "gather" in r["kernel"] and r.get("median_ms")),
                     None)
            if g:
                base["gather_ms"] = g["median_ms"]
            save()
            # the ladder at page 16, every NSPLIT of this batch
            best_ns = {}
            for name, _, _, kind in RUNGS:
                it = DEFAULT[name]
                if not passed(it[0]):
                    log(f"skip {it[0]}: {pre.get(it[0], {}).get('error', 'failed the preflight')[:200]}")
                    continue
                for ns in ([1] if kind == "contig1" else NSPLITS[B] + EXTRA_NSPLITS.get((name, B), [])):
                    if time.time() - T0 > GLOBAL_GUARD_S - 40:
                        break
                    rec = time_rung(it, prob, ns, ref, seqs,
                                    f"B{B} p{PAGES[0]}" if kind in PAGED_KINDS else f"B{B}",
                                    PAGES[0] if kind in PAGED_KINDS else None)
                    annotate(rec, base)
                    show(rec)
                    res["ladder"].append(rec)
                    if rec.get("ok") and (name not in best_ns or rec["median_ms"] < best_ns[name][1]):
                        best_ns[name] = (ns, rec["median_ms"])
                save()
            base["best_nsplit"] = {k: v[0] for k, v in best_ns.items()}
            # pages 64 and 256: the paged rungs at their best NSPLIT, and the gather baseline
            for P in PAGES[1:]:
                if time.time() - T0 > GLOBAL_GUARD_S - 40:
                    break
                try:
                    prob = be.timing_problem(B, P, reuse=prob)
                except Exception as e:
                    res["errors"].append(dict(where=f"pages {P} B{B}", error=repr(e)))
                    continue
                rec = dict(kernel=f"sdpa_default_gather_p{P}", B=B, page=P, bytes=prob.kv_bytes)
                try:
                    fn, out = be.sdpa_fn(prob, None, True)
                    out.clear()
                    t = be.bench(fn)
                    rec.update(t, gbps=prob.kv_bytes / (t["median_ms"] * 1e-3) / 1e9)
                except Exception as e:
                    rec["refused"] = repr(e)[:500]
                res["baselines"].append(rec)
                be.free()
                for name, _, _, kind in RUNGS:
                    if kind not in PAGED_KINDS or name not in best_ns:
                        continue
                    rec = time_rung(DEFAULT[name], prob, best_ns[name][0], ref, seqs, f"B{B} p{P}", P)
                    annotate(rec, base)
                    show(rec)
                    res["ladder"].append(rec)
                save()
            # ---- step 3: the sweep at this batch (page 16 where paged) ------------------------------
            prob = be.timing_problem(B, PAGES[0], reuse=prob) if prob.P != PAGES[0] else prob
            t_sw = time.time()
            for it in SWEEP:
                name = it[0].split("[")[0]
                if time.time() - t_sw > SWEEP_GUARD_S / len(TIME_B) or time.time() - T0 > GLOBAL_GUARD_S - 15:
                    log(f"sweep guard reached at B={B}")
                    break
                if not passed(it[0]):
                    res["sweep"].append(dict(kernel=it[0], B=B, error=pre.get(it[0], {}).get("error", "failed")))
                    continue
                kind = it[3]
                ns0 = best_ns.get(name, (1 if kind == "contig1" else NSPLITS[B][-1], 0))[0]
                for ns in sorted({ns0} if kind == "contig1" else {ns0, max(1, ns0 // 2), ns0 * 2}):
                    rec = time_rung(it, prob, ns, ref, seqs,
                                    f"B{B} p{PAGES[0]}" if kind in PAGED_KINDS else f"B{B}",
                                    PAGES[0] if kind in PAGED_KINDS else None)
                    annotate(rec, base)
                    show(rec)
                    res["sweep"].append(rec)
                save()
            del prob
            be.free()
        best = {}
        for r in res["ladder"] + res["sweep"]:
            if r.get("ok") and r.get("median_ms") and not r.get("local_bytes"):
                k = f"B{r['B']}" + (f" p{r['page']}" if r.get("page") else "")
                if k not in best or r["median_ms"] < best[k]["median_ms"]:
                    best[k] = dict(kernel=r["kernel"], nsplit=r["nsplit"], config=r.get("config"),
                                   median_ms=r["median_ms"], gbps=r["gbps"], pct_copy=r.get("pct_copy"),
                                   x_sdpa=r.get("x_sdpa"), x_gather=r.get("x_gather"))
        res["best"] = best
        save()

    if args.batch1:
        res.update(mode="batch1", shapes=dict(Hq=HQ, Hkv=HKV, D=HD, context=CTX, shapes=B1_SHAPES, nsplits=B1_NSPLITS))
    try:
        if args.batch1:
            run_batch1(be, res, save, outdir)
        else:
            work()
    except Exception as e:
        res["errors"].append(dict(where="main", error=repr(e), traceback=traceback.format_exc()[-3000:]))
        log("run stopped early:", repr(e))
        traceback.print_exc()
    finally:
        save()
        print_table(res, out_json)


def print_table(res, out_json):
    f = lambda x, fmt: (fmt.format(x) if x is not None else "-")
    print()
    print("preflight (irregular lengths, holes, shuffled pages, nsplit 1/3/16; O and LSE against fp64):")
    for lab, r in res["preflight"].items():
        b = r.get("build", {})
        worst = max([c.get("o_worst_ratio") or 0 for c in r.get("checks", [])] + [0])
        lworst = max([c.get("lse_err") or 0 for c in r.get("checks", [])] + [0])
        print(f"  {lab[:56]:56s} {'ok' if r.get('ok') else 'FAIL'}  regs {f(b.get('regs'), '{}'):>4s} "
              f"local {f(b.get('local_bytes'), '{}'):>3s}  O/bound {worst:5.2f}  LSE {lworst:.1e}"
              + ("" if r.get("ok") else f"  {r.get('error', '')[:60]}"))
    print()
    print(f"{'baseline':30s} {'B':>3s} {'page':>4s} {'ms':>9s} {'GB/s':>7s}  note")
    for r in res["baselines"]:
        note = r.get("refused", "")[:60] or " ".join(r.get("kernels", []))[:80]
        print(f"{r['kernel'][:30]:30s} {r['B']:3d} {f(r.get('page'), '{}'):>4s} {f(r.get('median_ms'), '{:9.4f}'):>9s} "
              f"{f(r.get('gbps'), '{:7.0f}'):>7s}  {note}")
    print()
    print(f"{'kernel':46s} {'where':10s} {'ns':>3s} {'ms':>9s} {'GB/s':>7s} {'%copy':>6s} {'x sdpa':>7s} "
          f"{'x gath':>7s} ok")
    for r in res["ladder"] + [dict(x, kernel="sweep " + x["kernel"]) for x in res["sweep"] if "median_ms" in x]:
        if "median_ms" not in r:
            print(f"{r['kernel'][:46]:46s} {r.get('where', ''):10s} FAILED {str(r.get('error'))[:60]}")
            continue
        print(f"{r['kernel'][:46]:46s} {r['where']:10s} {r['nsplit']:3d} {r['median_ms']:9.4f} {r['gbps']:7.0f} "
              f"{f(r.get('pct_copy'), '{:6.1f}'):>6s} {f(r.get('x_sdpa'), '{:6.2f}x'):>7s} "
              f"{f(r.get('x_gather'), '{:6.2f}x'):>7s} "
              f"{'n/a' if r.get('ok') is None else ('yes' if r.get('ok') else 'NO')}")
    for k, b in (res.get("best") or {}).items():
        print(f"best at {k}: {b['kernel']} nsplit {b['nsplit']}: {b['median_ms']:.4f} ms, {b['gbps']:.0f} GB/s, "
              f"{f(b.get('pct_copy'), '{:.1f}')}% of copy, {f(b.get('x_sdpa'), '{:.2f}')}x SDPA"
              + (f", {b['x_gather']:.2f}x SDPA+gather" if b.get("x_gather") else ""))
    for c in res.get("merge_cost") or []:
        print(f"merge launch at {c['where']}: {c['kernel']} nsplit {c['nsplit']}: {c['total_ms']:.4f} ms with "
              f"decode_merge, {c['split_ms']:.4f} ms without: {c['merge_ms'] * 1e3:.1f} us")
    if res.get("mode") == "batch1":
        for B, base in (res.get("bases") or {}).items():
            if base.get("copy_gbps"):
                print(f"85% of copy at B{B}: <= {base['bytes'] / (0.85 * base['copy_gbps'] * 1e9) * 1e3:.4f} ms "
                      f"({0.85 * base['copy_gbps']:.0f} GB/s of KV read)")
    print(f"\n{len(res['errors'])} errors; wrote {out_json}; total {time.time() - T0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
