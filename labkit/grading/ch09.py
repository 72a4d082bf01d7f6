"""Chapter 09 exercises: the numbers of a decode step (KV bytes, the floor time, blocks and splits, a page, the merge
of partial states with an empty split), the merge of split-KV partial states into the final output, and a paged GQA
decode kernel (split-KV over a paged cache, the splits merged in the same launch) timed against a copy of the bytes
it must read.

Both kernel tasks write two outputs, out (bf16) and lse (fp32, the natural log-sum-exp of each row's scaled scores;
-inf for a row with no key), each in its own poisoned, canary-fenced buffer (`KernelTask.outputs`), and are checked
by `labkit.chapters.ch09`'s own reference and tolerance (`verify`): fp64 from the exact inputs, computed before the
launch; out within 2^-8 |ref| + 2^-6 rms(ref row) + 2^-6 sd element by element, lse within 1e-3 + 2^-12 |ref|; a
row with no key exactly 0 and -inf. A NaN anywhere is wrong.

09.merge: the per-split NORMALISED outputs o (B, Hq, NSPLIT, 128) fp32 and natural lse (B, Hq, NSPLIT) fp32, an
empty split marked lse = -inf (its o is 0, the chapter's convention); shape (B, Hq, NSPLIT). Every case holds, by
row index r of the B Hq rows: r % 5 == 0 every split empty (out 0, lse -inf, no NaN), 1 one split alone, 2 and 3
lse near +10^4 and -10^4 spread by hundreds (e^lse overflows and underflows fp32 unless the max is subtracted),
4 about a third of the splits empty. One block of 128 threads per row. Correctness only.

09.paged_decode: q (B, Hq, 128) bf16, K and V pools of pages (num_pages, Hkv, P, 128) bf16, block_table
(B, max_pages) int32, seq_lens (B,) int32, Hq = 8 Hkv (query head h reads KV head h // 8): the layouts of
labkit.chapters.ch09. Shape (B, Hkv, L, P): the lengths are drawn from the shape (`lengths`): sequence 0 has L
keys, 1 has one key, 3 (when B > 3) none, the others 1..L; pages shuffled, a third of the pool's pages holes no
sequence owns, every row no sequence owns NaN (unused pages and the rows past each length in a last page), -1 in
the table past each sequence's pages and a spare column of -1; one key of sequence 0 has every element 128 (its
scores are about 128 N(0, 1): e^s overflows unless the max is subtracted). Grid (nsplit, Hkv, B), nsplit from L
(`nsplit`), 128 threads; the grader hands the kernel a workspace (ws_o, ws_lse of the split layout, NaN at the
start) and one int32 counter per (sequence, KV head), zero at the launch, which the kernel must leave at zero (the
check says so when it does not). Timed at SPEED_SHAPE against cupy.copyto of the bytes it must read (the KV rows of
the sequences' lengths, q and out), measured in the same grade.
"""
from __future__ import annotations

import math
import random

import numpy as np

from .tasks import KernelTask, NumericTask, Question, primes_between

# The speed bar of 09.paged_decode, % of a copy of the same bytes measured in the same grade at SPEED_SHAPE. An
# ESTIMATE, not a measurement: MUST BE SET FROM THE H200 MEASUREMENT of the reference solution (the notebook's
# paged_decode_src: grade it, read its "% of copy"), at about 0.75 x that figure (a margin for run-to-run spread and
# a busy GPU), and the notebook's markdown with it (a CPU test checks they agree).
# Estimate: the reference is the chapter's SIMT step (common/decode_attn.cuh, as in 03_paged.cu) with plain loads,
# two keys per warp step, no cp.async ring; at G = 8 the chapter predicts its SIMT rungs at 30-45% of copy (the math,
# not the bytes, is the roof), so a bar of 25%.
PAGED_SPEED_PCT = 25.0
SPEED_SHAPE = (64, 4, 8192, 16)            # B, Hkv, L (the longest length), P

D, GROUP, THREADS = 128, 8, 128
SPLIT_KEYS, MAX_NSPLIT = 256, 64           # the grader's nsplit: ceil(L / 256) splits, at most 64
MERGE_THREADS = 128
PLANT = 128.0
BF16_NAN = 0x7FC0

# ------------------------------------------------------------------------------------------- numbers

NB, NHQ, NHKV, NCTX, NBW, NSMS, NPAGE = 64, 32, 4, 32768, 4190.0, 132, 16
_KV = 2 * NB * NHKV * NCTX * D * 2
MA, LA, MB, LB = 3.0, 2.0, 1.0, 5.0            # two partial states of one row (m natural, l relative to m)

numbers = NumericTask(
    id="09.numbers",
    title=f"The numbers of a decode step (B = {NB}, Hq = {NHQ}, Hkv = {NHKV}, d = {D}, context {NCTX}, bf16 K and V; "
          f"{NSMS} SMs, copy bandwidth {NBW:,.0f} GB/s)",
    answers_var="decode_answers",
    questions=[
        Question("kv_bytes", f"bytes of K and V one decode step reads: every sequence {NCTX} keys, bf16", _KV,
                 "K and V, B x Hkv x context x d elements each, 2 bytes: the KV heads, not the query heads",
                 rtol=0.005),
        Question("floor_us", f"its floor time in microseconds at the copy bandwidth {NBW:,.0f} GB/s (the KV bytes only)",
                 _KV / (NBW * 1e9) * 1e6, "bytes / (GB/s x 1e9), in microseconds", rtol=0.01, unit="us"),
        Question("blocks_batch1", "(sequence, KV head) blocks at batch 1 (one block per pair, no split)", NHKV,
                 "B x Hkv: the G query heads of a group share one block", rtol=0),
        Question("splits_fill_1", f"splits per (sequence, KV head) that give one block per SM at batch 1 ({NSMS} SMs; "
                 "round up)", math.ceil(NSMS / NHKV), "SMs / (B Hkv), rounded up", rtol=0),
        Question("splits_fill_2", "the same for two blocks per SM", math.ceil(2 * NSMS / NHKV),
                 "2 SMs / (B Hkv), rounded up", rtol=0),
        Question("page_bytes", f"bytes of one page of {NPAGE} tokens of K for one KV head (d = {D}, bf16)",
                 NPAGE * D * 2, "P rows of d bf16 elements", rtol=0),
        Question("merged_lse", f"two splits' states of one row, (m, l) = ({MA:g}, {LA:g}) and ({MB:g}, {LB:g}) (l the "
                 "sum of e^(s - m) over the split's keys), and a third, empty split (m = -inf, l = 0): the merged "
                 "natural LSE = m + ln l", max(MA, MB) + math.log(LA * math.exp(MA - max(MA, MB))
                                                                    + LB * math.exp(MB - max(MA, MB))),
                 "m = the largest max (the empty split's -inf never wins), l = sum of l_i e^(m_i - m); the empty "
                 "split adds l = 0", rtol=0.002),
        Question("weight_first", "the weight of the first split's normalised output in the merged output "
                 "(out = sum_i w_i o_i / l_i)", LA * math.exp(MA) / (LA * math.exp(MA) + LB * math.exp(MB)),
                 "l_1 e^(m_1) over the sum of l_i e^(m_i): e^(lse_1 - lse)", rtol=0.002),
        Question("weight_empty", "the weight of the empty split", 0.0,
                 "e^(-inf - lse) = 0: nothing, and no NaN", rtol=0),
    ])


# ------------------------------------------------------------------------------------ shared pieces

def _ref_check(ref, outs, names):
    """What is wrong with the two outputs (host NumPy) against the fp64 reference (out, lse, sd)."""
    from ..chapters import ch09
    from ..measure import bf16
    if not isinstance(outs, dict):
        outs = {names[0]: outs}
    o = bf16.from_bits(outs[names[0]]).get().astype(np.float64)
    lse = outs[names[1]].get().astype(np.float64) if names[1] in outs else ref[1]
    return ch09.mismatches(o, lse, ref)


def _two_outputs(o_name, l_name):
    def outputs(shape):
        B, Hq = _rows(shape)
        return ((o_name, (B, Hq, D), "bfloat16"), (l_name, (B, Hq), "float32"))
    return outputs


def _rows(shape):
    """(B, Hq) of either task's shape."""
    if len(shape) == 3:                                 # 09.merge: (B, Hq, NSPLIT)
        return shape[0], shape[1]
    return shape[0], GROUP * shape[1]                   # 09.paged_decode: (B, Hkv, L, P)


# -------------------------------------------------------------------------------------------- merge

def _merge_inputs(case, gen):
    import cupy as cp
    B, Hq, ns = case.shape
    o = gen.normal((B, Hq, ns, D), "f32")
    lse = gen.normal((B, Hq, ns), "f32", scale=3.0)
    rng = np.random.default_rng(case.seed)
    R = B * Hq
    r = np.arange(R)
    empty = rng.random((R, ns)) < 0.33
    empty[r % 5 != 4] = False
    empty[r % 5 == 0] = True                                      # every split empty
    one = np.nonzero(r % 5 == 1)[0]
    empty[one] = True
    empty[one, rng.integers(0, ns, one.size)] = False              # one split alone
    scale = np.ones(R, dtype=np.float32)
    shift = np.zeros(R, dtype=np.float32)
    scale[r % 5 == 2], shift[r % 5 == 2] = 100.0, 1e4              # lse ~ 1e4 +- hundreds: e^lse overflows
    scale[r % 5 == 3], shift[r % 5 == 3] = 100.0, -1e4             # ... and underflows
    l2 = lse.reshape(R, ns)
    l2 *= cp.asarray(scale)[:, None]
    l2 += cp.asarray(shift)[:, None]
    e = cp.asarray(empty)
    l2[e] = -cp.inf
    o.reshape(R, ns, D)[e] = 0.0
    return {"o": (o, "f32"), "lse": (lse, "f32")}


def _merge_verify(ins, case):
    from ..chapters import ch09
    o, lse = ins["o"][0].get(), ins["lse"][0].get()
    ro, rl = ch09.merge_splits(o, lse)
    ref = (ro, rl, np.zeros_like(ro))

    def check(outs):
        return "; ".join(_ref_check(ref, outs, ("out", "out_lse"))) or None
    return check


def _merge_launch(k, ins, out, case, ctx):
    import cupy as cp
    B, Hq, ns = case.shape
    k((B * Hq,), (MERGE_THREADS,), (ins["o"], ins["lse"], out["out"], out["out_lse"], cp.int32(ns)))


def _merge_bytes(s):
    B, Hq, ns = s
    return B * Hq * ns * (D + 1) * 4 + B * Hq * (2 * D + 4)


def _merge_ref_bytes(s):
    B, Hq, ns = s
    return 2 * B * Hq * ns * (D + 1) * 4 + (64 << 20)


def _merge_hidden(rng):
    """Fixed: one row of the most splits, many rows of two splits, one split; drawn: a prime number of splits."""
    return [(1, 5, 1024), (64, 32, 2), (3, 7, 1), (7, 3, primes_between(rng, 100, 900))]


_MERGE_SIG = ('extern "C" __global__ void merge_splits(const float* o, const float* lse, unsigned short* out, '
              'float* out_lse, int nsplit)')

merge = KernelTask(
    id="09.merge",
    title="The merge of split-KV partial states: nsplit normalised outputs and their LSE into one row (d = 128)",
    kernel="merge_splits",
    signature=_MERGE_SIG,
    source_var="merge_src",
    shapes=[(1, 1, 1), (2, 5, 3), (4, 8, 16), (3, 5, 64), (2, 5, 1000)],
    inputs=_merge_inputs, reference=None, verify=_merge_verify, outputs=_two_outputs("out", "out_lse"),
    launch=_merge_launch,
    out_shape=lambda s: (s[0], s[1], D), out_dtype="bfloat16",
    bytes_moved=_merge_bytes, ref_bytes=_merge_ref_bytes,
    launch_text="grid = B * Hq blocks of 128 threads, no dynamic shared memory: block r merges row r = b Hq + h. "
                "Contract: o (B, Hq, nsplit, 128) fp32, each split's NORMALISED output (o_s / l_s); lse (B, Hq, "
                "nsplit) fp32, natural; an empty split has lse = -inf (and o = 0); out (B, Hq, 128) bf16, out_lse "
                "(B, Hq) fp32; 1 <= nsplit <= 1024; a row whose splits are all empty: out 0 and out_lse -inf",
    points_correct=3, points_hidden=1, points_speed=0,
    hidden_shapes=_merge_hidden,
)


# ------------------------------------------------------------------------------------- paged decode

def lengths(shape) -> list[int]:
    """The sequence lengths of a 09.paged_decode shape (B, Hkv, L, P): drawn from the shape alone, so that the
    bytes the kernel must read are known before the inputs exist. Sequence 0 has L keys, 1 one key, 3 none."""
    B, Hkv, L, P = shape
    r = random.Random(f"lens|{tuple(shape)}")
    lens = [r.randint(1, L) for _ in range(B)]
    lens[0] = L
    if B > 1:
        lens[1] = 1
    if B > 3:
        lens[3] = 0
    return lens


def nsplit(shape) -> int:
    """The grader's split count for a shape: ceil(L / 256), at most 64 (the grid's x dimension)."""
    return max(1, min(MAX_NSPLIT, -(-shape[2] // SPLIT_KEYS)))


def _pages(shape):
    B, Hkv, L, P = shape
    npg = [-(-n // P) for n in lengths(shape)]
    used = sum(npg)
    return npg, -(-L // P) + 1, used + used // 2 + 3            # pages per sequence, max_pages, num_pages


def _paged_inputs(case, gen):
    import cupy as cp
    from ..measure import bf16
    B, Hkv, L, P = case.shape
    lens = lengths(case.shape)
    npg, max_pages, num_pages = _pages(case.shape)
    rng = np.random.default_rng(case.seed)
    perm = rng.permutation(num_pages)
    bt = np.full((B, max_pages), -1, dtype=np.int32)
    at = 0
    for b in range(B):
        bt[b, :npg[b]] = perm[at:at + npg[b]]
        at += npg[b]
    q = gen.normal((B, GROUP * Hkv, D), "bf16")
    K = gen.normal((num_pages, Hkv, P, D), "bf16")
    V = gen.normal((num_pages, Hkv, P, D), "bf16")
    holes = cp.asarray(perm[at:])
    for a in (K, V):
        a[holes] = BF16_NAN                                     # pages no sequence owns
        for b in range(B):                                      # the rows past each length in its last page
            if lens[b] % P:
                a[int(bt[b, npg[b] - 1]), :, lens[b] % P:] = BF16_NAN
    if lens[0]:                                                 # one key of huge scores in sequence 0
        j = case.seed % lens[0]
        K[int(bt[0, j // P]), :, j % P, :] = bf16.to_bits(cp.full((D,), PLANT, dtype=cp.float32))
    return {"q": (q, "bf16"), "K": (K, "bf16"), "V": (V, "bf16"),
            "block_table": (cp.asarray(bt), "i32"), "seq_lens": (cp.asarray(np.array(lens, dtype=np.int32)), "i32")}


def reference_gpu(q, Kp, Vp, bt, lens):
    """ch09.reference over the pages, on the GPU in fp64 one sequence at a time: (out, lse, sd) as NumPy."""
    import cupy as cp
    from ..measure import bf16
    B, Hq, d = q.shape
    _, Hkv, P, _ = Kp.shape
    G = Hq // Hkv
    o, lse, sd = np.zeros((B, Hq, d)), np.full((B, Hq), -np.inf), np.zeros((B, Hq, d))
    bt_h = bt.get()
    qf = bf16.from_bits(q).astype(cp.float64)
    for b, n in enumerate(lens):
        if n == 0:
            continue
        pages = cp.asarray(bt_h[b, :-(-n // P)])

        def rows(pool):
            x = pool[pages].transpose(1, 0, 2, 3).reshape(Hkv, -1, d)[:, :n]
            return bf16.from_bits(cp.ascontiguousarray(x)).astype(cp.float64)
        k, v = rows(Kp), rows(Vp)
        s = cp.matmul(qf[b].reshape(Hkv, G, d), k.transpose(0, 2, 1)) / math.sqrt(d)
        m = s.max(-1, keepdims=True)
        w = cp.exp(s - m)
        den = w.sum(-1, keepdims=True)
        w /= den
        o[b] = cp.matmul(w, v).reshape(Hq, d).get()
        lse[b] = (m + cp.log(den)).reshape(Hq).get()
        sd[b] = cp.sqrt(cp.matmul(w * w, v * v)).reshape(Hq, d).get()
        del k, v, s, w
    return o, lse, sd


_workspace: dict = {}


def _ws_key(case):
    return (tuple(case.shape), case.seed, case.hidden)


def _paged_verify(ins, case):
    ref = reference_gpu(ins["q"][0], ins["K"][0], ins["V"][0], ins["block_table"][0], lengths(case.shape))
    key = _ws_key(case)

    def check(outs):
        problems = _ref_check(ref, outs, ("out", "lse"))
        ws = _workspace.get(key)
        if ws is not None:
            left = int((ws[2] != 0).sum())
            if left:
                problems.append(f"counters: {left} of {ws[2].size} not zero after the launch (the last block of "
                                "each (sequence, KV head) must reset its counter to 0 for the next launch)")
        return "; ".join(problems) or None
    return check


def workspace(case):
    """The workspace of a case (allocated once per case, kept for its timed launches): ws_o (B, Hq, nsplit, 128)
    and ws_lse (B, Hq, nsplit) fp32 filled with NaN, counters (B, Hkv) int32 zero."""
    import cupy as cp
    key = _ws_key(case)
    if key not in _workspace:
        _workspace.clear()
        B, Hkv, L, P = case.shape
        ns = nsplit(case.shape)
        _workspace[key] = (cp.full((B, GROUP * Hkv, ns, D), cp.nan, dtype=cp.float32),
                           cp.full((B, GROUP * Hkv, ns), cp.nan, dtype=cp.float32),
                           cp.zeros((B, Hkv), dtype=cp.int32))
    return _workspace[key]


def _paged_launch(k, ins, out, case, ctx):
    import cupy as cp
    B, Hkv, L, P = case.shape
    ws_o, ws_l, cnt = workspace(case)
    ns = nsplit(case.shape)
    k((ns, Hkv, B), (THREADS,),
      (ins["q"], ins["K"], ins["V"], ins["block_table"], ins["seq_lens"], out["out"], out["lse"], ws_o, ws_l, cnt,
       cp.int32(Hkv), cp.int32(P.bit_length() - 1), cp.int32(ins["block_table"].shape[1]), cp.int32(ns)))


def _paged_bytes(s):
    """What the kernel must move: the K and V rows of the sequences' lengths, q read and out written (bf16)."""
    B, Hkv, L, P = s
    return 2 * sum(lengths(s)) * Hkv * D * 2 + 2 * B * GROUP * Hkv * D * 2


def _paged_flops(s):
    B, Hkv, L, P = s
    return 4 * GROUP * Hkv * sum(lengths(s)) * D


def _paged_ref_bytes(s):
    """GPU bytes of the whole pool (holes and partial pages beyond the bytes moved), the workspace, and the
    reference's fp64 copies of the longest sequence's rows with its scores."""
    B, Hkv, L, P = s
    _, _, num_pages = _pages(s)
    pool = 2 * num_pages * Hkv * P * D * 2
    ws = B * GROUP * Hkv * nsplit(s) * (D + 1) * 4 + B * Hkv * 4
    return 2 * pool + ws + 8 * Hkv * L * D * 8 + 64 * GROUP * Hkv * L + (64 << 20)


def _paged_hidden(rng):
    """Fixed: one sequence of 32768 keys (64 splits), many short ones, pages of 32 and 256; drawn: a prime longest
    length, a random batch and number of KV heads."""
    return [(1, 4, 32768, 16), (64, 1, 300, 16), (5, 2, 777, 32), (3, 2, 2049, 256),
            (rng.randrange(4, 10), rng.randrange(1, 5), primes_between(rng, 100, 3000), rng.choice([16, 32, 64]))]


_PAGED_SIG = ('extern "C" __global__ void paged_decode(const unsigned short* q, const unsigned short* K, '
              'const unsigned short* V, const int* block_table, const int* seq_lens, unsigned short* out, float* lse, '
              'float* ws_o, float* ws_lse, int* counters, int Hkv, int pshift, int max_pages, int nsplit)')

paged_decode = KernelTask(
    id="09.paged_decode",
    title="Paged GQA decode: split-KV over a paged KV cache, the splits merged in the same launch (d = 128, G = 8)",
    kernel="paged_decode",
    signature=_PAGED_SIG,
    source_var="paged_decode_src",
    shapes=[(1, 1, 1, 16), (4, 2, 100, 16), (6, 2, 700, 16), (3, 1, 1000, 64), (8, 4, 4097, 16)],
    inputs=_paged_inputs, reference=None, verify=_paged_verify, outputs=_two_outputs("out", "lse"),
    launch=_paged_launch,
    out_shape=lambda s: (s[0], GROUP * s[1], D), out_dtype="bfloat16",
    bytes_moved=_paged_bytes, flops=_paged_flops, ref_bytes=_paged_ref_bytes,
    launch_text="grid = (nsplit, Hkv, B), block = 128 threads, no dynamic shared memory, nsplit = min(64, ceil(L / "
                "256)) for the case's longest length L: block (s, hkv, b) owns split s of the keys of sequence b for "
                "KV head hkv and its 8 query heads hkv * 8 .. hkv * 8 + 7; the grader's workspace ws_o (B, Hq, nsplit, "
                "128) and ws_lse (B, Hq, nsplit) fp32 is yours (NaN at the start), counters (B, Hkv) int32 are zero "
                "at the launch and must be zero when it ends. Contract: q, out (B, Hq, 128) bf16, lse (B, Hq) fp32 "
                "natural, K, V pools of pages (num_pages, Hkv, P, 128) bf16, key t of sequence b at row t % P of "
                "page block_table[b, t / P], P = 1 << pshift, block_table (B, max_pages) int32 (-1 past a "
                "sequence's pages), seq_lens (B) int32 from 0 to max_pages P, Hq = 8 Hkv (query head h reads KV "
                "head h / 8), scale 1/sqrt(128); an empty sequence: out 0 and lse -inf",
    speed_shape=SPEED_SHAPE, speed_threshold=PAGED_SPEED_PCT,
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_paged_hidden,
)

TASKS = (numbers, merge, paged_decode)
