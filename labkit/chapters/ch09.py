"""Chapter 09: decode attention over a KV cache (FlashDecoding, PagedAttention, GQA), a ladder from one block per
(sequence, KV head) to a paged split-KV kernel on tensor cores, against a copy of the same bytes and PyTorch's
scaled_dot_product_attention on a contiguous cache and over gathered pages.

One new query token per head and sequence: out[b, h] = softmax(q[b, h] K[b, h // G]^T / sqrt(d)) V[b, h // G] over
the first seq_lens[b] keys, with the natural log-sum-exp of the scaled scores as a second output (fp32; -inf and a
zero output for an empty sequence). Hq = G Hkv query heads, G = 1..8 (grouped-query attention: query head h reads
KV head h // G); d = 64 or 128 (compile-time HEAD_DIM, with GROUP). Arrays: CuPy, bf16 as uint16 bit patterns.

Layouts (those of labs/results/logs/2026-12-01/decode-attention-sweep.py):
- q, out (B, Hq, d) bf16; lse (B, Hq) fp32; seq_lens (B,) int32;
- contiguous cache (rungs 01, 02): K, V (B, Hkv, Smax, d) bf16, seq_lens <= Smax;
- paged cache (rungs 03-05): K, V pools of pages (num_pages, Hkv, P, d) bf16, P a power of two, and a block
  table (B, max_pages) int32 mapping key t of sequence b to row t % P of page block_table[b, t // P]; entries
  past a sequence's pages are never read (-1 is fine there), seq_lens <= max_pages P;
- split rungs: a workspace ws_o (B, Hq, nsplit, d) fp32 of each split's normalised output and ws_lse (B, Hq,
  nsplit) fp32, merged by decode_merge when nsplit > 1 (allocated here unless given); rung 05 merges inside the
  split kernel and adds counters (B, Hkv) int32 to the workspace, zero at every launch and left zero by it
  (allocated zeroed once per launcher unless given).

Kernels (kernels/09-decode-attention/), geometry from each file's launch_config:
- 01_one_block_per_head.cu  one block per (sequence, KV head), the group's G heads in the block (SIMT);
- 02_split_kv.cu            the keys of each (sequence, KV head) split over nsplit blocks, then a merge;
- 03_paged.cu               split-KV over a paged cache, rows prefetched by a cp.async ring, page ids a stage ahead;
- 04_paged_mma.cu           the same ring, the GQA group as the M dimension of mma.sync m16n8k16;
- 05_fused_merge.cu         rung 04 with the merge in the split kernel (the last split of each (sequence, KV head)
                            merges, counted on an atomic counter) and the block table in shared memory.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from ..errors import CheckFailed, KernelInputError
from ..measure import bf16
from ..measure.checks import GuardedOutput, expect
from ..measure.compile import compile_check, kernel, load_module, opt_in_shared_memory
from ..measure.timing import bench, bench_interleaved, pooled

OP = "decode_attention"
HEADLINE = {OP: "64x32x4x32768x128x16"}          # batch x Hq x Hkv x context x d x page (0: contiguous)
# the shapes: Hq = 32, Hkv = 4 (G = 8), d = 128, every sequence 32768 keys, batch 1 and 64, pages 16, 64
BATCHES, HQ, HKV, HEAD_DIM, CONTEXT, PAGES = (1, 64), 32, 4, 128, 32768, (16, 64)
QUICK = dict(batches=(1, 8), context=8192, pages=(16,))
# irregular checks: (sequence lengths, Hkv, page size); every (group, head dim) of CHECK_GD; nsplit 1, 3, 16
CHECK_CASES = [([1], 2, 16), ([7], 1, 16), ([4097], 2, 64), ([0, 1, 7, 16, 33, 300, 1000, 2049, 4097], 2, 16),
               ([5, 4097, 64, 129], 1, 256)]
CHECK_GD = ((8, 128), (4, 128), (1, 128), (8, 64), (4, 64), (1, 64))
CHECK_NSPLITS = (1, 3, 16)
MAX_SPLITS = 1024                                # DEC_MAX_SPLITS in common/decode_attn.cuh
SPLIT_ALIGN = 64                                 # split chunks: multiples of 64 keys (SPLIT_ALIGN in 02-04; 05: 16)
BF16_NAN = 0x7FC0
# tolerance: bf16 output rounding, fp32 accumulation, p rounded to bf16 before P V (rung 04)
O_REL, O_ROW, O_SD = 2.0 ** -8, 2.0 ** -6, 2.0 ** -6
LSE_ABS, LSE_REL = 1e-3, 2.0 ** -12


@dataclasses.dataclass(frozen=True)
class Rung:
    name: str
    path: str
    function: str
    kind: str                    # "one" (no split), "split" (contiguous, split + merge), "paged" (split + merge),
                                 # "fused" (paged, the merge inside the split kernel, counters)
    macros: tuple = ()
    per_sm: int = 2              # blocks per SM the default split count aims at (default_nsplit)
    split_align: int = SPLIT_ALIGN   # keys per split chunk multiple (SPLIT_ALIGN in the file)
    max_splits: int = MAX_SPLITS     # the largest nsplit the kernel takes

    @property
    def paged(self) -> bool:
        return self.kind in ("paged", "fused")

    @property
    def splits(self) -> bool:
        return self.kind != "one"

    @property
    def fused(self) -> bool:
        """The merge happens in the split kernel: no decode_merge, a counters array in the workspace."""
        return self.kind == "fused"

    @property
    def merge(self) -> bool:
        """A second kernel, decode_merge, merges the splits when nsplit > 1."""
        return self.kind in ("split", "paged")


RUNGS = (Rung("one_block", "09-decode-attention/01_one_block_per_head.cu", "decode_one_block", "one"),
         Rung("split_kv", "09-decode-attention/02_split_kv.cu", "decode_split", "split"),
         Rung("paged", "09-decode-attention/03_paged.cu", "decode_paged", "paged"),
         Rung("paged_mma", "09-decode-attention/04_paged_mma.cu", "decode_paged_mma", "paged", per_sm=1),
         Rung("fused_merge", "09-decode-attention/05_fused_merge.cu", "decode_fused", "fused", per_sm=1,
              split_align=16, max_splits=256))
BEST = "paged_mma"
BASELINES = {"contiguous": "sdpa_contiguous", "paged": "sdpa_gathered"}


def rungs() -> dict[str, Rung]:
    return {r.name: r for r in RUNGS}


def options(macros) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in sorted(dict(macros).items()))


def build(rung: Rung, group: int, head_dim: int, **macros) -> Rung:
    """The rung compiled for one GQA group size and head dim (GROUP and HEAD_DIM are compile-time macros)."""
    m = {**dict(rung.macros), **macros, "GROUP": int(group), "HEAD_DIM": int(head_dim)}
    return dataclasses.replace(rung, macros=tuple(sorted(m.items())))


@dataclasses.dataclass(frozen=True)
class Geometry:
    """What launch_config() writes: out[0..9]."""
    threads: int
    smem: int
    head_dim: int
    group: int
    keys_per_step: int
    stages: int
    warps: int
    splits: int              # 1: no split (rung 01); 0: a runtime argument
    merge_threads: int       # 0: no merge kernel
    paged: int


@functools.lru_cache(maxsize=None)
def geometry(path: str, macros: tuple) -> Geometry:
    import cupy as cp
    out = cp.zeros(16, dtype=cp.int32)
    load_module(path, options(macros)).get_function("launch_config")((1,), (1,), (out,))
    return Geometry(*(int(x) for x in out.get()[:10]))


@functools.lru_cache(maxsize=None)
def _kernel(path: str, function: str, macros: tuple):
    return opt_in_shared_memory(kernel(path, function, options(macros)), geometry(path, macros).smem,
                                f"{path} with {dict(macros) or 'its defaults'}")


def compile_report(rung: Rung, arch: str, group: int = 8, head_dim: int = 128, **macros):
    """ptxas' report (registers, shared memory, spills) of one build of a rung, without a GPU (NVRTC)."""
    r = build(rung, group, head_dim, **macros)
    return compile_check(r.path, arch, options(r.macros))


# ------------------------------------------------------------------------------------ arithmetic

def kv_bytes(B: int, Hkv: int, context: int, d: int) -> int:
    """The K and V rows a decode step must read: 2 B Hkv context d bf16 (every sequence `context` keys)."""
    return 2 * B * Hkv * context * d * 2


def decode_bytes(B: int, Hq: int, Hkv: int, context: int, d: int) -> int:
    """What a decode step must move: the KV bytes, q read and out written (bf16). The LSE (4 B Hq), the block
    table and the split workspace are not counted (the workspace: B Hq nsplit (d + 1) 4 bytes each way)."""
    return kv_bytes(B, Hkv, context, d) + 2 * B * Hq * d * 2


def decode_flops(B: int, Hq: int, context: int, d: int) -> int:
    """4 B Hq context d: q K^T and p V, 2 FLOPs per multiply-add. Over the KV bytes (4 B Hkv context d) that is
    G FLOP per byte: 8 at G = 8, far left of the tensor-core ridge, though half the fp32 FMA ridge."""
    return 4 * B * Hq * context * d


def floor_ms(nbytes: int, gbps: float) -> float:
    """The time a step of `nbytes` takes at `gbps` (the copy roof): the floor no decode kernel beats."""
    return nbytes / (gbps * 1e9) * 1e3


def shape_key(B, Hq, Hkv, context, d, page) -> str:
    return f"{B}x{Hq}x{Hkv}x{context}x{d}x{page}"


def split_range(length: int, nsplit: int, split: int, align: int = SPLIT_ALIGN) -> tuple[int, int]:
    """Keys [k0, k1) of split `split` (dec_split_range): chunks of ceil(length / nsplit) rounded up to `align`
    keys, so the last splits of a short sequence are empty (k0 == k1)."""
    chunk = -(-length // nsplit)
    chunk = -(-chunk // align) * align
    k0 = min(length, split * chunk)
    return k0, min(length, k0 + chunk)


def default_nsplit(B: int, Hkv: int, context: int, sms: int = 132, per_sm: int = 2,
                   max_splits: int = MAX_SPLITS) -> int:
    """Splits enough for about `per_sm` blocks per SM (B Hkv nsplit >= per_sm SMs), never chunks under 512 keys, at
    most max_splits: 64 at batch 1 (Hkv 4, 32k keys, 132 SMs), 2 at batch 64; with one block per SM (rungs 04 and 05,
    whose 196-200 KB of shared memory allow one) 33 at batch 1, every SM busy, and 1 at batch 64."""
    want = -(-per_sm * sms // max(1, B * Hkv))
    return int(max(1, min(want, -(-context // 512), max_splits)))


def workspace_bytes(B: int, Hq: int, d: int, nsplit: int, Hkv: int = 0) -> int:
    """The split workspace (ws_o and ws_lse), plus rung 05's counters when Hkv is given."""
    return (B * Hq * nsplit * (d + 1) * 4 if nsplit > 1 else 0) + 4 * B * Hkv


# ------------------------------------------------------------------------------------ input checks

def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _want(name, a, dtype, shape=None, ndim=None):
    if np.dtype(a.dtype) != np.dtype(dtype):
        raise KernelInputError(f"{name} has dtype {a.dtype}, expected {np.dtype(dtype)}"
                               + (" (bf16 is stored as uint16 bit patterns: see labkit.measure.bf16)"
                                  if np.dtype(dtype) == np.uint16 else ""))
    if ndim is not None and a.ndim != ndim:
        raise KernelInputError(f"{name} has {a.ndim} dimensions {tuple(a.shape)}, expected {ndim}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise KernelInputError(f"{name} has shape {tuple(a.shape)}, expected {tuple(shape)}")


@dataclasses.dataclass(frozen=True)
class Problem:
    B: int
    Hq: int
    Hkv: int
    d: int
    paged: bool
    capacity: int            # Smax, or max_pages x P
    page: int = 0
    max_pages: int = 0
    num_pages: int = 0
    max_len: int = 0

    @property
    def group(self) -> int:
        return self.Hq // self.Hkv

    @property
    def Smax(self) -> int:
        return self.capacity

    @property
    def pshift(self) -> int:
        return self.page.bit_length() - 1


def validate(q, K, V, seq_lens, out, lse, block_table=None) -> Problem:
    """Check the operands' dtypes, shapes and values (NumPy or CuPy arrays); raise KernelInputError naming the
    operand and what is wrong, else return the problem's sizes. Values read: seq_lens in [0, capacity], and the
    block-table entries each sequence uses (its first ceil(len / P)) in [0, num_pages)."""
    _want("q", q, np.uint16, ndim=3)
    B, Hq, d = (int(x) for x in q.shape)
    if d not in (64, 128):
        raise KernelInputError(f"head dim d = {d}: the kernels are built for d = 64 or 128")
    if B < 1 or Hq < 1:
        raise KernelInputError(f"q has shape {tuple(q.shape)}: at least one sequence and one head")
    _want("K", K, np.uint16, ndim=4)
    _want("V", V, np.uint16, shape=tuple(K.shape))
    paged = block_table is not None
    if paged:
        num_pages, Hkv, P, dk = (int(x) for x in K.shape)
    else:
        Bk, Hkv, Smax, dk = (int(x) for x in K.shape)
        if Bk != B:
            raise KernelInputError(f"K has {Bk} sequences (shape {tuple(K.shape)} = (B, Hkv, Smax, d)), q has {B}; "
                                   "a pool of pages (num_pages, Hkv, P, d) needs block_table")
    if dk != d:
        raise KernelInputError(f"K and V have head dim {dk}, q has {d}")
    if Hkv < 1 or Hq % Hkv:
        raise KernelInputError(f"Hq = {Hq} query heads is not a multiple of Hkv = {Hkv} KV heads (GQA: query head h "
                               "reads KV head h // (Hq / Hkv))")
    G = Hq // Hkv
    if not 1 <= G <= 8:
        raise KernelInputError(f"GQA group Hq / Hkv = {G}: the kernels take groups of 1 to 8 query heads per KV head")
    if B > 65535 or Hkv > 65535 or B * Hq >= 2 ** 31:
        raise KernelInputError(f"B = {B}, Hkv = {Hkv}: at most 65535 each (grid dimensions), B x Hq below 2^31")
    _want("seq_lens", seq_lens, np.int32, shape=(B,))
    _want("out", out, np.uint16, shape=(B, Hq, d))
    _want("lse", lse, np.float32, shape=(B, Hq))
    if paged:
        _want("block_table", block_table, np.int32, ndim=2)
        if int(block_table.shape[0]) != B:
            raise KernelInputError(f"block_table has shape {tuple(block_table.shape)}: one row per sequence "
                                   f"(B = {B}), expected ({B}, max_pages)")
        if P < 1 or P & (P - 1):
            raise KernelInputError(f"page size P = {P} (K.shape[2]): a power of two")
        max_pages = int(block_table.shape[1])
        capacity = max_pages * P
        where = f"the block table's capacity {capacity} keys ({max_pages} pages x page {P})"
    else:
        P, max_pages, num_pages, capacity = 0, 0, 0, Smax
        where = f"the cache's capacity Smax = {Smax} (K.shape[2])"
    lens = _host(seq_lens).astype(np.int64)
    if lens.size and lens.min() < 0:
        b = int(np.argmax(lens < 0))
        raise KernelInputError(f"seq_lens[{b}] = {int(lens[b])}: a length is at least 0")
    if lens.size and lens.max() > capacity:
        b = int(np.argmax(lens > capacity))
        raise KernelInputError(f"seq_lens[{b}] = {int(lens[b])} exceeds {where}")
    if paged:
        bt = _host(block_table)
        used = -(-lens // P)
        cols = np.arange(max_pages)[None, :]
        bad = (cols < used[:, None]) & ((bt < 0) | (bt >= num_pages))
        if bad.any():
            b, j = (int(x) for x in np.argwhere(bad)[0])
            raise KernelInputError(f"block_table[{b}, {j}] = {int(bt[b, j])} is not a page of the pool (0..{num_pages - 1}), "
                                   f"and sequence {b} ({int(lens[b])} keys, {int(used[b])} pages of {P}) reads it")
    return Problem(B, Hq, Hkv, d, paged, capacity, P, max_pages, num_pages, int(lens.max()) if lens.size else 0)


def _device_checks(**arrays):
    for name, a in arrays.items():
        if a is not None:
            expect(name, a, align=16)


# ------------------------------------------------------------------------------------ launches

def resolve(version: str = BEST, rung: Rung | None = None) -> Rung:
    if rung is not None:
        return rung
    if version not in rungs():
        raise KernelInputError(f"no decode version {version!r}: one of {', '.join(rungs())}")
    return rungs()[version]


def launcher(q, K, V, seq_lens, out, lse, *, block_table=None, version: str = BEST, rung: Rung | None = None,
             nsplit: int | None = None, workspace=None, sms: int | None = None):
    """A zero-argument function launching one rung (and its merge when nsplit > 1); arguments checked and packed
    once. `workspace` = (ws_o, ws_lse) fp32 arrays of (B, Hq, nsplit, d) and (B, Hq, nsplit), allocated if None;
    rung 05 (fused) takes (ws_o, ws_lse, counters), counters (B, Hkv) int32 that must be zero before its first
    launch (each launch leaves them zero); without them it allocates zeroed counters once, kept by the returned
    function, so its launches must stay in one stream's order. nsplit defaults to default_nsplit (1 for rung 01,
    which takes no split)."""
    import cupy as cp
    r = resolve(version, rung)
    if r.paged and block_table is None:
        raise KernelInputError(f"rung {r.name} reads a paged cache: pass block_table (B, max_pages) and K, V as pools "
                               "of pages (num_pages, Hkv, P, d)")
    if not r.paged and block_table is not None:
        raise KernelInputError(f"rung {r.name} reads a contiguous cache (B, Hkv, Smax, d): block_table is for the "
                               "paged rungs (" + ", ".join(x.name for x in RUNGS if x.paged) + ")")
    _device_checks(q=q, K=K, V=V, seq_lens=seq_lens, out=out, lse=lse, block_table=block_table)
    p = validate(q, K, V, seq_lens, out, lse, block_table)
    if nsplit is None:
        if not r.splits:
            nsplit = 1
        else:
            if sms is None:
                sms = int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"])
            nsplit = default_nsplit(p.B, p.Hkv, max(p.max_len, 1), sms, r.per_sm, r.max_splits)
    if not isinstance(nsplit, (int, np.integer)) or not 1 <= nsplit <= r.max_splits:
        raise KernelInputError(f"nsplit = {nsplit!r}: an integer from 1 to {r.max_splits}"
                               + (f" for rung {r.name}" if r.max_splits != MAX_SPLITS else ""))
    if not r.splits and nsplit != 1:
        raise KernelInputError(f"rung {r.name} takes no split (nsplit = 1), got nsplit = {nsplit}")
    b = build(r, p.group, p.d)
    g = geometry(b.path, b.macros)
    k = _kernel(b.path, b.function, b.macros)
    block, i32 = (g.threads, 1, 1), np.int32
    if not r.splits:
        grid = (p.Hkv, p.B, 1)
        args = (q, K, V, seq_lens, out, lse, i32(p.Hkv), i32(p.Smax))
        return lambda: k(grid, block, args, shared_mem=g.smem)
    counters = None
    if workspace is None:                          # at nsplit 1 the kernel never touches it: 16 bytes each
        ws_o = cp.empty((p.B, p.Hq, nsplit, p.d) if nsplit > 1 else (4,), dtype=cp.float32)
        ws_l = cp.empty((p.B, p.Hq, nsplit) if nsplit > 1 else (4,), dtype=cp.float32)
    else:
        if len(workspace) not in ((2, 3) if r.fused else (2,)):
            raise KernelInputError(f"workspace: (ws_o, ws_lse){' or (ws_o, ws_lse, counters)' if r.fused else ''}, "
                                   f"got {len(workspace)} arrays")
        ws_o, ws_l = workspace[0], workspace[1]
        if nsplit > 1:
            _want("ws_o", ws_o, np.float32, shape=(p.B, p.Hq, nsplit, p.d))
            _want("ws_lse", ws_l, np.float32, shape=(p.B, p.Hq, nsplit))
        _device_checks(ws_o=ws_o, ws_lse=ws_l)
        if len(workspace) == 3:
            counters = workspace[2]
            _want("counters", counters, np.int32, shape=(p.B, p.Hkv))
            _device_checks(counters=counters)
    grid = (nsplit, p.Hkv, p.B)
    if r.fused:
        if counters is None:                       # zeroed once; every launch leaves them zero
            counters = cp.zeros((p.B, p.Hkv), dtype=cp.int32)
        args = (q, K, V, block_table, seq_lens, out, lse, ws_o, ws_l, counters, i32(p.Hkv), i32(p.pshift),
                i32(p.max_pages), i32(nsplit))
        return lambda: k(grid, block, args, shared_mem=g.smem)
    if r.paged:
        args = (q, K, V, block_table, seq_lens, out, lse, ws_o, ws_l, i32(p.Hkv), i32(p.pshift), i32(p.max_pages),
                i32(nsplit))
    else:
        args = (q, K, V, seq_lens, out, lse, ws_o, ws_l, i32(p.Hkv), i32(p.Smax), i32(nsplit))
    if nsplit == 1:
        return lambda: k(grid, block, args, shared_mem=g.smem)
    merge = kernel(b.path, "decode_merge", options(b.macros))
    margs, mgrid, mblock = (ws_o, ws_l, out, lse, i32(nsplit)), (p.B * p.Hq,), (g.merge_threads,)

    def run():
        k(grid, block, args, shared_mem=g.smem)
        merge(mgrid, mblock, margs)
    return run


def decode(q, K, V, seq_lens, out, lse, *, block_table=None, version: str = BEST, rung: Rung | None = None,
           nsplit: int | None = None, workspace=None) -> None:
    """out, lse = decode attention of one query token per head over the cache, with one rung of the ladder."""
    launcher(q, K, V, seq_lens, out, lse, block_table=block_table, version=version, rung=rung, nsplit=nsplit,
             workspace=workspace)()


# ------------------------------------------------------------------------------------ reference (NumPy)

def _f64(a):
    a = np.asarray(a)
    return bf16.from_bits(a).astype(np.float64) if a.dtype == np.uint16 else a.astype(np.float64)


def reference(q, K, V, seq_lens, seqs=None):
    """fp64 out, natural LSE and sd = sqrt(sum_j w_j^2 v_j^2) (the scale of the error rounding p to bf16 puts in
    each output) of decode attention over a contiguous cache: q (B, Hq, d), K, V (B, Hkv, S, d) as floats or
    bf16 bits (NumPy), GQA: query head h reads KV head h // (Hq / Hkv). An empty sequence: out 0, lse -inf.
    With `seqs`, only those sequences (rows of the result in that order)."""
    q, K, V = _f64(q), _f64(K), _f64(V)
    B, Hq, d = q.shape
    Hkv = K.shape[1]
    G = Hq // Hkv
    seqs = list(range(B)) if seqs is None else list(seqs)
    lens = np.asarray(seq_lens)
    o = np.zeros((len(seqs), Hq, d))
    lse = np.full((len(seqs), Hq), -np.inf)
    sd = np.zeros((len(seqs), Hq, d))
    for i, b in enumerate(seqs):
        n = int(lens[b])
        if n == 0:
            continue
        for hk in range(Hkv):
            k, v = K[b, hk, :n], V[b, hk, :n]
            s = q[b, hk * G:(hk + 1) * G] @ k.T / math.sqrt(d)
            m = s.max(-1, keepdims=True)
            w = np.exp(s - m)
            den = w.sum(-1, keepdims=True)
            w /= den
            o[i, hk * G:(hk + 1) * G] = w @ v
            lse[i, hk * G:(hk + 1) * G] = (m + np.log(den))[:, 0]
            sd[i, hk * G:(hk + 1) * G] = np.sqrt((w * w) @ (v * v))
    return o, lse, sd


def gather_pages(pool, block_table, seq_lens):
    """The contiguous cache (B, Hkv, max_pages P, d) a paged pool (num_pages, Hkv, P, d) and its block table hold;
    rows past each sequence's length (and pages it does not use) are zero. NumPy."""
    pool, bt, lens = np.asarray(pool), np.asarray(block_table), np.asarray(seq_lens)
    _, Hkv, P, d = pool.shape
    B, max_pages = bt.shape
    out = np.zeros((B, Hkv, max_pages * P, d), dtype=pool.dtype)
    for b in range(B):
        n = int(lens[b])
        for j in range(-(-n // P)):
            rows = min(P, n - j * P)
            out[b, :, j * P:j * P + rows] = pool[int(bt[b, j]), :, :rows]
    return out


def reference_paged(q, Kp, Vp, block_table, seq_lens, seqs=None):
    """`reference` over a paged cache: the pages gathered through the block table first."""
    return reference(q, gather_pages(Kp, block_table, seq_lens), gather_pages(Vp, block_table, seq_lens), seq_lens,
                     seqs)


def split_states(q, K, V, seq_lens, nsplit: int, align: int = SPLIT_ALIGN):
    """What the split kernels write to the workspace, in fp64: each split's normalised output (B, Hq, nsplit, d)
    and natural LSE (B, Hq, nsplit) over its keys (split_range with `align`: a rung's split_align); an empty
    split: 0 and -inf."""
    q = _f64(q)
    B, Hq, d = q.shape
    lens = np.asarray(seq_lens)
    ws_o, ws_l = np.zeros((B, Hq, nsplit, d)), np.full((B, Hq, nsplit), -np.inf)
    for b in range(B):
        for s in range(nsplit):
            k0, k1 = split_range(int(lens[b]), nsplit, s, align)
            if k1 <= k0:
                continue
            sub = np.zeros(B, dtype=np.int64)
            sub[b] = k1 - k0
            o, l, _ = reference(q, _f64(K)[:, :, k0:k1], _f64(V)[:, :, k0:k1], sub, [b])
            ws_o[b, :, s], ws_l[b, :, s] = o[0], l[0]
    return ws_o, ws_l


def merge_splits(ws_o, ws_lse):
    """decode_merge in NumPy: M = max_s lse_s, w_s = e^(lse_s - M), out = sum_s w_s o_s / sum_s w_s, lse = M +
    ln sum_s w_s. A split with lse = -inf weighs 0; if every split is empty, out = 0 and lse = -inf."""
    ws_o, ws_lse = np.asarray(ws_o, dtype=np.float64), np.asarray(ws_lse, dtype=np.float64)
    M = ws_lse.max(-1, keepdims=True)
    mu = np.where(np.isneginf(M), 0.0, M)
    w = np.exp(ws_lse - mu)
    W = w.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(W[..., None] > 0, (w[..., None] * ws_o).sum(-2) / np.where(W > 0, W, 1)[..., None], 0.0)
        lse = np.where(W > 0, mu[..., 0] + np.log(np.where(W > 0, W, 1)), -np.inf)
    return out, lse


def mismatches(got_o, got_lse, ref) -> list[str]:
    """The chapter's tolerance on NumPy arrays: each element of out within 2^-8 |ref| + 2^-6 rms(ref row) +
    2^-6 sd, lse within 1e-3 + 2^-12 |ref|; an empty sequence exactly 0 and -inf; a NaN is wrong. Returns what
    is wrong, one deterministic text per output (count, first index, expected and got)."""
    ro, rl, rsd = ref
    o = np.asarray(got_o, dtype=np.float64)
    out = []
    row = np.sqrt((ro ** 2).mean(-1, keepdims=True))
    bound = O_REL * np.abs(ro) + O_ROW * row + O_SD * rsd
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(o - ro) <= bound)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        out.append(f"out: {int(bad.sum())} of {bad.size} elements wrong; first at {list(idx)}: expected "
                   f"{ro[idx]:.6g}, got {o[idx]:.6g}")
    lse = np.asarray(got_lse, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        fin = np.isfinite(rl)
        ok = np.where(fin, np.abs(lse - np.where(fin, rl, 0)) <= LSE_ABS + LSE_REL * np.abs(np.where(fin, rl, 0)),
                      lse == rl)
    if not ok.all():
        idx = tuple(int(i) for i in np.argwhere(~ok)[0])
        out.append(f"lse: {int((~ok).sum())} of {ok.size} rows wrong; first at {list(idx)}: expected "
                   f"{rl[idx]:.6g}, got {lse[idx]:.6g}")
    return out


# ------------------------------------------------------------------------------------ check cases

@dataclasses.dataclass
class Case:
    """One check case on the host (bf16 bits): q, the contiguous cache (rows past each length NaN), its paged
    copy (pages shuffled, spare pages NaN, holes no sequence owns, -1 in the table past each sequence's pages, a
    spare column), lengths, and the fp64 reference."""
    lens: np.ndarray
    q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    Kp: np.ndarray
    Vp: np.ndarray
    bt: np.ndarray
    page: int
    ref: tuple

    @property
    def shape(self):
        B, Hq, d = self.q.shape
        return B, Hq, self.K.shape[1], d


def make_case(lens, Hkv: int, G: int, d: int, page: int, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    lens = np.asarray(lens, dtype=np.int32)
    B, Hq = len(lens), G * Hkv
    Smax = int(lens.max()) + 5
    q = bf16.to_bits(rng.standard_normal((B, Hq, d), dtype=np.float32))
    K = bf16.to_bits(rng.standard_normal((B, Hkv, Smax, d), dtype=np.float32))
    V = bf16.to_bits(rng.standard_normal((B, Hkv, Smax, d), dtype=np.float32))
    for b, n in enumerate(lens):
        K[b, :, n:] = BF16_NAN
        V[b, :, n:] = BF16_NAN
    npg = [-(-int(n) // page) for n in lens]
    max_pages = max(npg) + 1                              # a spare column: -1 everywhere
    used = sum(npg)
    num_pages = used + used // 2 + 3                      # holes: pages no sequence owns
    perm = rng.permutation(num_pages)
    bt = np.full((B, max_pages), -1, dtype=np.int32)
    Kp = np.full((num_pages, Hkv, page, d), BF16_NAN, dtype=np.uint16)
    Vp = np.full_like(Kp, BF16_NAN)
    at = 0
    for b, n in enumerate(lens):
        for j in range(npg[b]):
            pg = int(perm[at])
            at += 1
            bt[b, j] = pg
            rows = min(page, int(n) - j * page)
            Kp[pg, :, :rows] = K[b, :, j * page:j * page + rows]
            Vp[pg, :, :rows] = V[b, :, j * page:j * page + rows]
    return Case(lens, q, K, V, Kp, Vp, bt, page, reference(q, K, V, lens))


@functools.lru_cache(maxsize=64)
def _case(ci: int, G: int, d: int) -> Case:
    lens, Hkv, page = CHECK_CASES[ci]
    return make_case(lens, Hkv, G, d, page, seed=100 * ci + 10 * G + d)


def run_case(rung: Rung, case: Case, nsplit: int):
    """Launch `rung` on `case` into poisoned, canary-padded outputs (and workspace); returns the GuardedOutputs
    (out, lse, ws_o, ws_lse; the last two None at nsplit 1)."""
    import cupy as cp
    B, Hq, Hkv, d = case.shape
    out, lse = GuardedOutput((B, Hq, d), "bfloat16"), GuardedOutput((B, Hq), "float32")
    ws = None
    if nsplit > 1:
        ws = (GuardedOutput((B, Hq, nsplit, d), "float32"), GuardedOutput((B, Hq, nsplit), "float32"))
    q, lens = cp.asarray(case.q), cp.asarray(case.lens)
    if rung.paged:
        K, V, bt = cp.asarray(case.Kp), cp.asarray(case.Vp), cp.asarray(case.bt)
    else:
        K, V, bt = cp.asarray(case.K), cp.asarray(case.V), None
    decode(q, K, V, lens, out.array, lse.array, block_table=bt, rung=rung, nsplit=nsplit,
           workspace=(ws[0].array, ws[1].array) if ws else None)
    cp.cuda.Device().synchronize()
    return out, lse, ws[0] if ws else None, ws[1] if ws else None


def check_rung(ctx, rung: Rung, ci: int, G: int, d: int, nsplit: int) -> None:
    """One rung on check case `ci` at group G and head dim d with nsplit splits: every output element written,
    nothing written outside, out and lse within the chapter's tolerance of the fp64 reference."""
    case = _case(ci, G, d)
    lens, Hkv, page = CHECK_CASES[ci]
    label = (f"decode {rung.name} lens {lens if len(lens) < 6 else f'{lens[:3]}..({len(lens)})'} Hkv{Hkv} G{G} d{d}"
             + (f" page {page}" if rung.paged else "") + f" nsplit {nsplit}")
    out, lse, wo, wl = run_case(build(rung, G, d), case, nsplit)
    problems = out.problems() + [f"lse: {p}" for p in lse.problems()]
    for name, w in (("ws_o", wo), ("ws_lse", wl)):
        if w is not None:
            problems += [f"{name}: {p}" for p in w.problems()]
    if not problems:
        problems = mismatches(out.values(), lse.values(), case.ref)
    if problems:
        raise CheckFailed(f"{label}: " + "; ".join(problems))
    ctx.log.append(f"ok  {label}")


def check_all(ctx, names=None) -> None:
    for name, rung in rungs().items():
        if names is not None and name not in names:
            continue
        for G, d in CHECK_GD:
            for ci in range(len(CHECK_CASES)):
                for ns in (CHECK_NSPLITS if rung.splits else (1,)):
                    check_rung(ctx, rung, ci, G, d, ns)


# ------------------------------------------------------------------------------------ baselines

def _torch(a):
    return bf16.as_torch(a)


def sdpa_contiguous(q, K, V):
    """A zero-argument function: torch SDPA (default dispatch, enable_gqa) of q (B, Hq, 1, d) over the contiguous
    cache K, V (B, Hkv, S, d), every sequence full length S."""
    import torch.nn.functional as F
    B, Hq, d = q.shape
    q4, k, v = _torch(q).view(B, Hq, 1, d), _torch(K), _torch(V)
    return lambda: F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)


def sdpa_gathered(q, Kp, Vp, block_table):
    """A zero-argument function: the pages gathered into a contiguous (B, Hkv, max_pages P, d) cache
    (pool[block_table].permute.reshape: the KV read and written once more), then SDPA as sdpa_contiguous."""
    import torch
    import torch.nn.functional as F
    B, Hq, d = q.shape
    q4, kp, vp = _torch(q).view(B, Hq, 1, d), _torch(Kp), _torch(Vp)
    bt = torch.from_dlpack(block_table).long()
    Hkv = kp.shape[1]

    def run():
        k = kp[bt].permute(0, 2, 1, 3, 4).reshape(B, Hkv, -1, d)
        v = vp[bt].permute(0, 2, 1, 3, 4).reshape(B, Hkv, -1, d)
        return F.scaled_dot_product_attention(q4, k, v, enable_gqa=True)
    return run


# ------------------------------------------------------------------------------------ benchmarks

def random_bf16(shape, seed: int):
    """Standard-normal bf16 bits of `shape` on the GPU, filled in chunks (a 2 GB cache needs no 8 GB fp32 copy)."""
    import cupy as cp
    out = cp.empty(shape, dtype=cp.uint16)
    flat = out.reshape(-1)
    rs = cp.random.RandomState(seed)
    step = 1 << 26
    for i in range(0, flat.size, step):
        j = min(flat.size, i + step)
        flat[i:j] = bf16.to_bits(rs.standard_normal(j - i, dtype=cp.float32))
    return out


def page_pool(K, page: int, seed: int):
    """The paged copy of a full contiguous cache K (B, Hkv, S, d): a pool of B S / P + B S / (16 P) + 1 pages
    (the spare ones NaN), pages in a random order; returns (pool, block_table)."""
    import cupy as cp
    B, Hkv, S, d = K.shape
    n_b = S // page
    num_pages = B * n_b + B * n_b // 16 + 1
    perm = cp.random.RandomState(seed).permutation(num_pages)[:B * n_b].astype(cp.int32)
    pool = cp.full((num_pages, Hkv, page, d), BF16_NAN, dtype=cp.uint16)
    for b in range(B):                          # one sequence at a time: no second copy of the whole cache
        pool[perm[b * n_b:(b + 1) * n_b]] = K[b].reshape(Hkv, n_b, page, d).transpose(1, 0, 2, 3)
    return pool, perm.reshape(B, n_b)


def _verify_timed(ctx, label, out, lse, ref, seqs):
    """The timed output, first and last sequence, against the fp64 reference."""
    problems = out.problems() + [f"lse: {p}" for p in lse.problems()]
    if not problems:
        problems = mismatches(out.values()[seqs], lse.values()[seqs], ref)
    if problems:
        raise CheckFailed(f"{label}: " + "; ".join(problems))
    ctx.log.append(f"ok  {label}")


def _pick_nsplit(make, n0: int, most: int = MAX_SPLITS) -> int:
    """The fastest of n0 / 2, n0, 2 n0 splits (a few runs each), at most `most`."""
    cands = sorted({max(1, n0 // 2), n0, min(most, 2 * n0)})
    times = {n: bench(make(n), max_reps=10, warmup_ms=5.0).median_ms for n in cands}
    return min(times, key=times.get)


def benchmarks(ctx):
    """Per batch: the irregular checks first; then every rung at the issue's shapes, each timed in alternation
    with its SDPA baseline (bench_interleaved): one_block and split_kv against SDPA on the contiguous cache
    (shape page 0), paged, paged_mma and fused_merge against SDPA over the gathered pages at each page size. Each timed
    output is checked on its first and last sequence; the baselines' records pool their runs from every pair."""
    import cupy as cp
    from .ch06 import have_torch
    torch_ok = have_torch(ctx)
    check_all(ctx)
    q_cfg = QUICK if ctx.quick else dict(batches=BATCHES, context=CONTEXT, pages=PAGES)
    S, Hq, Hkv, d = q_cfg["context"], HQ, HKV, HEAD_DIM
    for B in q_cfg["batches"]:
        q = random_bf16((B, Hq, d), 9000 + B)
        K, V = random_bf16((B, Hkv, S, d), 9100 + B), random_bf16((B, Hkv, S, d), 9200 + B)
        lens = cp.full((B,), S, dtype=cp.int32)
        seqs = sorted({0, B - 1})
        ref = reference(q[seqs].get(), K[seqs].get(), V[seqs].get(), np.full(len(seqs), S))

        def group(layout, page, rung_names, base_fn, arrays):
            base_name = BASELINES[layout]
            timed, base_times = [], []
            for name in rung_names:
                r = rungs()[name]
                out, lse = GuardedOutput((B, Hq, d), "bfloat16"), GuardedOutput((B, Hq), "float32")
                kw = dict(block_table=arrays.get("bt"), rung=r)
                n0 = default_nsplit(B, Hkv, S, ctx.sms, r.per_sm, r.max_splits) if r.splits else 1
                if r.splits and not ctx.quick:
                    n0 = _pick_nsplit(lambda n: launcher(q, arrays["K"], arrays["V"], lens, out.array, lse.array,
                                                         nsplit=n, **kw), n0, r.max_splits)
                run = launcher(q, arrays["K"], arrays["V"], lens, out.array, lse.array, nsplit=n0, **kw)
                run()
                cp.cuda.Device().synchronize()
                _verify_timed(ctx, f"decode {name} B{B} Hq{Hq} Hkv{Hkv} S{S} d{d}"
                              + (f" page {page}" if page else "") + f" nsplit {n0} (timed inputs)", out, lse, ref, seqs)
                if base_fn is not None:
                    ts = bench_interleaved({"rung": run, "sdpa": base_fn}, max_reps=30)
                    timed.append((name, ts["rung"], ts["sdpa"], n0))
                    base_times.append(ts["sdpa"])
                else:
                    timed.append((name, bench(run, max_reps=30), None, n0))
                del out, lse
            shape = (B, Hq, Hkv, S, d, page)
            if base_times:
                yield _record(ctx, base_name, shape, pooled(base_times), None, 0)
            for name, t, base, n in timed:
                yield _record(ctx, name, shape, t, base, n, layout)

        base = sdpa_contiguous(q, K, V) if torch_ok else None
        yield from group("contiguous", 0, ("one_block", "split_kv"), base, dict(K=K, V=V))
        for page in q_cfg["pages"]:
            Kp, bt = page_pool(K, page, 7 * page + B)
            Vp, _ = page_pool(V, page, 7 * page + B)          # the same permutation: the same seed
            base = sdpa_gathered(q, Kp, Vp, bt) if torch_ok else None
            yield from group("paged", page, ("paged", "paged_mma", "fused_merge"), base, dict(K=Kp, V=Vp, bt=bt))
            del Kp, Vp, bt, base
            cp.get_default_memory_pool().free_all_blocks()
        del q, K, V, lens
        cp.get_default_memory_pool().free_all_blocks()


def _record(ctx, kernel_name, shape, t, base, nsplit, layout=None):
    B, Hq, Hkv, S, d, page = shape
    own = not kernel_name.startswith("sdpa_")
    what = "SDPA over gathered pages" if layout == "paged" else "SDPA contiguous"
    return ctx.record(chapter="09", op=OP, kernel=kernel_name, shape=list(shape), dtype="bfloat16",
                      bytes=decode_bytes(B, Hq, Hkv, S, d), flops=decode_flops(B, Hq, S, d), timing=t,
                      baseline=what if base is not None and own else None,
                      baseline_timing=base if own else None, ceiling="copy",
                      note=f"nsplit={nsplit}" if own else ("gather included" if kernel_name == "sdpa_gathered" else ""))
