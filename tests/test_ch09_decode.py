"""Chapter 09 (decode attention): the byte and FLOP arithmetic, the split ranges, the fp64 reference and the merge
of partial states on tiny NumPy cases, the input checks' messages, every rung compiling without spills; on a
GPU, every rung on the irregular cases and an empty split merging as nothing, and rung 05's counters: zero after
every launch, so that launches repeat bit for bit, and its block-table window moving along a long split."""
import math
import re

import numpy as np
import pytest

from labkit.chapters import ch09
from labkit.errors import KernelInputError
from labkit.measure.context import Context
from labkit.measure import bf16


# --------------------------------------------------------------------------------------- arithmetic

def test_bytes_flops_and_floor_of_the_issue_shapes():
    # batch 1: 4 KV heads x 32768 keys x 128 dims x 2 bytes, K and V: 64 MiB
    assert ch09.kv_bytes(1, 4, 32768, 128) == 2 * 4 * 32768 * 128 * 2 == 67_108_864
    assert ch09.decode_bytes(1, 32, 4, 32768, 128) == 67_108_864 + 2 * 32 * 128 * 2
    assert ch09.decode_bytes(64, 32, 4, 32768, 128) == 64 * 67_108_864 + 64 * 2 * 32 * 128 * 2
    assert ch09.decode_flops(1, 32, 32768, 128) == 4 * 32 * 32768 * 128
    # intensity: G FLOP per KV byte
    assert ch09.decode_flops(64, 32, 32768, 128) / ch09.kv_bytes(64, 4, 32768, 128) == 8
    assert ch09.floor_ms(4.0e9, 4000.0) == pytest.approx(1.0)
    assert ch09.shape_key(64, 32, 4, 32768, 128, 16) == ch09.HEADLINE[ch09.OP]
    assert ch09.workspace_bytes(1, 32, 128, 64) == 32 * 64 * 129 * 4
    assert ch09.workspace_bytes(1, 32, 128, 1) == 0
    assert ch09.workspace_bytes(1, 32, 128, 33, Hkv=4) == 32 * 33 * 129 * 4 + 4 * 4      # rung 05's counters


def test_default_split_count_fills_the_gpu_without_tiny_chunks():
    assert ch09.default_nsplit(1, 4, 32768, 132) == 64          # 256 blocks of 512 keys
    assert ch09.default_nsplit(64, 4, 32768, 132) == 2          # 512 blocks
    assert ch09.default_nsplit(1, 4, 1000, 132) == 2            # chunks of at least 512 keys
    assert ch09.default_nsplit(1, 1, 10 ** 7, 132) == 264
    assert ch09.default_nsplit(1, 1, 10 ** 9, 10 ** 4) == ch09.MAX_SPLITS
    assert ch09.default_nsplit(1000, 8, 5, 132) == 1
    # one block per SM (rung 05): 33 x 4 = 132 blocks at batch 1, every SM busy; at most its 256 splits
    fused = ch09.rungs()["fused_merge"]
    assert ch09.default_nsplit(1, 4, 32768, 132, fused.per_sm, fused.max_splits) == 33
    assert ch09.default_nsplit(64, 4, 32768, 132, fused.per_sm, fused.max_splits) == 1
    assert ch09.default_nsplit(1, 1, 10 ** 9, 10 ** 4, fused.per_sm, fused.max_splits) == 256
    assert ch09.default_nsplit(1, 4, 1000, 132, fused.per_sm, fused.max_splits) == 2


def test_33_splits_of_16_keys_fill_132_sms_where_64_keys_leave_one_empty():
    ranges = [ch09.split_range(32768, 33, s, align=16) for s in range(33)]
    assert all(k1 > k0 for k0, k1 in ranges) and max(k1 - k0 for k0, k1 in ranges) == 1008
    assert ranges[-1] == (32 * 1008, 32768)
    assert ch09.split_range(32768, 33, 32) == (32768, 32768)         # 64-key chunks: 32 x 1024, the last empty


def test_the_rungs_split_constants_are_the_files():
    from labkit.paths import KERNELS
    for r in ch09.RUNGS:
        if not r.splits:
            continue
        src = (KERNELS / r.path).read_text()
        assert re.search(rf"#define SPLIT_ALIGN {r.split_align}\b", src), r.name
        if r.fused:
            assert re.search(rf"#define MERGE_MAX_SPLITS {r.max_splits}\b", src), r.name
            assert "decode_merge" not in src and "int* __restrict__ counters" in src


@pytest.mark.parametrize("n, ns", [(0, 1), (1, 16), (7, 3), (64, 2), (65, 2), (4097, 16), (32768, 64), (1000, 1024)])
def test_split_ranges_tile_the_keys_in_chunks_of_64(n, ns):
    ranges = [ch09.split_range(n, ns, s) for s in range(ns)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    for (a0, a1), (b0, b1) in zip(ranges, ranges[1:]):
        assert a1 == b0 and a0 <= a1
    for k0, k1 in ranges:
        assert k0 % 64 == 0 or k0 == n
    assert sum(k1 - k0 for k0, k1 in ranges) == n
    if n <= 64:
        assert all(k0 == k1 for k0, k1 in ranges[1:])             # a short sequence: one split, the rest empty


# --------------------------------------------------------------------------------------- reference

def _tiny(B=2, Hkv=2, G=4, S=9, d=64, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, G * Hkv, d))
    K = rng.standard_normal((B, Hkv, S, d))
    V = rng.standard_normal((B, Hkv, S, d))
    return q, K, V


def test_reference_is_softmax_attention_with_the_gqa_mapping():
    q, K, V = _tiny()
    lens = np.array([9, 5])
    o, lse, sd = ch09.reference(q, K, V, lens)
    for b in range(2):
        for h in range(8):
            n = lens[b]
            s = K[b, h // 4, :n] @ q[b, h] / math.sqrt(64)
            w = np.exp(s - s.max())
            assert np.allclose(o[b, h], (w / w.sum()) @ V[b, h // 4, :n])
            assert lse[b, h] == pytest.approx(np.log(np.exp(s).sum()))
            assert np.allclose(sd[b, h], np.sqrt((w / w.sum()) ** 2 @ V[b, h // 4, :n] ** 2))
    # changing KV head 1 changes query heads 4..7 only
    K2 = K.copy()
    K2[:, 1] += np.random.default_rng(9).standard_normal(K2[:, 1].shape)   # (a constant would cancel in softmax)
    o2 = ch09.reference(q, K2, V, lens)[0]
    assert np.array_equal(o2[:, :4], o[:, :4]) and not np.allclose(o2[:, 4:], o[:, 4:])


def test_reference_special_cases():
    q, K, V = _tiny(B=3)
    K[:, :, 3:] = np.nan                           # rows past the lengths are never read
    V[:, :, 3:] = np.nan
    lens = np.array([0, 1, 3])
    o, lse, sd = ch09.reference(q, K, V, lens)
    assert np.all(o[0] == 0) and np.all(np.isneginf(lse[0])) and np.all(sd[0] == 0)
    assert np.allclose(o[1], np.repeat(V[1, :, 0], 4, axis=0))   # one key: out = its value row
    assert np.allclose(lse[1], np.einsum("hd,hd->h", q[1], np.repeat(K[1, :, 0], 4, axis=0)) / 8)
    assert np.isfinite(o[2]).all()
    qz = np.zeros_like(q)                           # equal scores: the mean of the rows, lse = ln n
    o, lse, _ = ch09.reference(qz, K, V, lens)
    assert np.allclose(o[2], np.repeat(V[2, :, :3].mean(1), 4, axis=0)) and np.allclose(lse[2], np.log(3))


def test_reference_takes_bf16_bits_and_selected_sequences():
    q, K, V = _tiny(B=3)
    lens = np.array([9, 4, 6])
    bits = [bf16.to_bits(x.astype(np.float32)) for x in (q, K, V)]
    full = ch09.reference(*bits, lens)
    part = ch09.reference(bits[0][[0, 2]], bits[1][[0, 2]], bits[2][[0, 2]], lens[[0, 2]])
    assert np.allclose(part[0], full[0][[0, 2]]) and np.allclose(part[1], full[1][[0, 2]])
    assert np.allclose(ch09.reference(*bits, lens, seqs=[2])[0][0], full[0][2])


def test_paged_cases_hold_the_contiguous_cache_with_holes_and_shuffled_pages():
    c = ch09.make_case([0, 1, 7, 40], Hkv=2, G=4, d=64, page=16, seed=3)
    assert c.bt.shape == (4, 4) and c.bt[0, 0] == -1 and np.all(c.bt[:, -1] == -1)      # a spare column
    used = c.bt[c.bt >= 0]
    assert len(set(used.tolist())) == len(used) == 1 + 1 + 3 and c.Kp.shape[0] > len(used)   # holes
    assert not np.array_equal(np.sort(used), used)                                      # shuffled
    ref = ch09.reference_paged(c.q, c.Kp, c.Vp, c.bt, c.lens)
    assert np.allclose(ref[0], c.ref[0]) and np.array_equal(ref[1], c.ref[1])
    g = ch09.gather_pages(c.Kp, c.bt, c.lens)
    assert np.array_equal(g[3, :, :40], c.K[3, :, :40])
    assert np.isnan(bf16.from_bits(c.K[2, :, 7:])).all()          # past the length: NaN


@pytest.mark.parametrize("nsplit", [1, 2, 3, 16])
def test_merged_split_states_are_the_softmax_of_all_keys(nsplit):
    q, K, V = _tiny(S=200)
    lens = np.array([200, 70])
    ws_o, ws_l = ch09.split_states(q, K, V, lens, nsplit)
    o, lse = ch09.merge_splits(ws_o, ws_l)
    ref = ch09.reference(q, K, V, lens)
    assert np.allclose(o, ref[0]) and np.allclose(lse, ref[1])
    if nsplit == 16:                                  # chunks of 64 keys: splits 4.. of 200 keys, 2.. of 70 empty
        assert np.isneginf(ws_l[0, :, 4:]).all() and np.isneginf(ws_l[1, :, 2:]).all()
        assert (ws_o[1, :, 2:] == 0).all()


def test_an_empty_split_merges_as_nothing():
    rng = np.random.default_rng(1)
    ws_o, ws_l = rng.standard_normal((2, 3, 4, 8)), rng.standard_normal((2, 3, 4))
    o, lse = ch09.merge_splits(ws_o, ws_l)
    ws_o2 = np.concatenate([ws_o, np.full((2, 3, 1, 8), 7.0)], axis=2)      # whatever an empty split's o says
    ws_l2 = np.concatenate([ws_l, np.full((2, 3, 1), -np.inf)], axis=2)
    o2, lse2 = ch09.merge_splits(ws_o2, ws_l2)
    assert np.allclose(o2, o) and np.allclose(lse2, lse)
    oe, le = ch09.merge_splits(np.zeros((1, 1, 5, 8)), np.full((1, 1, 5), -np.inf))    # every split empty
    assert (oe == 0).all() and np.isneginf(le).all() and not np.isnan(oe).any()


def test_tolerance_accepts_the_reference_and_names_what_is_wrong():
    c = ch09.make_case([0, 5, 33], Hkv=1, G=8, d=64, page=16)
    o, lse, sd = c.ref
    assert ch09.mismatches(bf16.from_bits(bf16.to_bits(o.astype(np.float32))), lse, c.ref) == []
    bad = o.copy()
    bad[2, 3, 10] += 0.5
    msg = ch09.mismatches(bad, lse, c.ref)
    assert len(msg) == 1 and msg[0].startswith("out: 1 of") and "[2, 3, 10]" in msg[0]
    nan = o.copy()
    nan[1, 0, 0] = np.nan
    assert "[1, 0, 0]" in ch09.mismatches(nan, lse, c.ref)[0]
    zero = o.copy()
    zero[0, 0, 0] = 1e-3                                              # an empty sequence: exactly 0
    assert "[0, 0, 0]" in ch09.mismatches(zero, lse, c.ref)[0]
    l2 = lse.copy()
    l2[0, 0] = 0.0                                                    # an empty sequence: -inf, not a number
    l2[2, 1] += 0.01
    m = ch09.mismatches(o, l2, c.ref)
    assert len(m) == 1 and m[0].startswith("lse: 2 of 24 rows wrong; first at [0, 0]")


# --------------------------------------------------------------------------------------- input checks

def _ops(B=2, Hq=8, Hkv=2, S=64, d=128, paged=False, P=16, num_pages=20):
    u = np.uint16
    q = np.zeros((B, Hq, d), u)
    if paged:
        K = V = np.zeros((num_pages, Hkv, P, d), u)
        bt = np.arange(B * (S // P), dtype=np.int32).reshape(B, S // P)
    else:
        K = V = np.zeros((B, Hkv, S, d), u)
        bt = None
    lens = np.full(B, S, np.int32)
    return dict(q=q, K=K, V=V, seq_lens=lens, out=np.zeros((B, Hq, d), u), lse=np.zeros((B, Hq), np.float32),
                block_table=bt)


def test_valid_operands_give_the_problem_sizes():
    p = ch09.validate(**_ops())
    assert (p.B, p.Hq, p.Hkv, p.d, p.group, p.capacity, p.paged) == (2, 8, 2, 128, 4, 64, False)
    p = ch09.validate(**_ops(paged=True))
    assert (p.page, p.pshift, p.max_pages, p.num_pages, p.capacity, p.paged) == (16, 4, 4, 20, 64, True)


@pytest.mark.parametrize("change, msg", [
    (dict(q=np.zeros((2, 8, 128), np.float32)), "q has dtype float32, expected uint16 (bf16 is stored as uint16"),
    (dict(q=np.zeros((2, 8, 96), np.uint16), out=np.zeros((2, 8, 96), np.uint16)), "head dim d = 96"),
    (dict(q=np.zeros((2, 6, 128), np.uint16)), "Hq = 6 query heads is not a multiple of Hkv = 4"),
    (dict(q=np.zeros((2, 32, 128), np.uint16)), "GQA group Hq / Hkv = 16"),
    (dict(K=np.zeros((3, 2, 64, 128), np.uint16), V=np.zeros((3, 2, 64, 128), np.uint16)),
     "K has 3 sequences (shape (3, 2, 64, 128) = (B, Hkv, Smax, d)), q has 2; a pool of pages"),
    (dict(V=np.zeros((2, 2, 65, 128), np.uint16)), "V has shape (2, 2, 65, 128), expected (2, 2, 64, 128)"),
    (dict(seq_lens=np.array([64, 65], np.int32)), "seq_lens[1] = 65 exceeds the cache's capacity Smax = 64"),
    (dict(seq_lens=np.array([-1, 5], np.int32)), "seq_lens[0] = -1"),
    (dict(seq_lens=np.array([1, 5], np.int64)), "seq_lens has dtype int64, expected int32"),
    (dict(out=np.zeros((2, 8, 64), np.uint16)), "out has shape (2, 8, 64), expected (2, 8, 128)"),
    (dict(lse=np.zeros((2, 8), np.float16)), "lse has dtype float16, expected float32"),
])
def test_bad_contiguous_operands_are_named(change, msg):
    ops = _ops()
    if "q" in change and change["q"].shape[1] in (6, 32):
        ops = _ops(Hkv=4 if change["q"].shape[1] == 6 else 2)
        ops["K"] = ops["V"] = np.zeros((2, 4 if change["q"].shape[1] == 6 else 2, 64, 128), np.uint16)
        ops["out"] = np.zeros(change["q"].shape, np.uint16)
        ops["lse"] = np.zeros(change["q"].shape[:2], np.float32)
    ops.update(change)
    with pytest.raises(KernelInputError, match=re.escape(msg)):
        ch09.validate(**ops)


def test_bad_paged_operands_are_named():
    ops = _ops(paged=True)
    ops["block_table"] = ops["block_table"].copy()
    ops["block_table"][1, 2] = 20
    with pytest.raises(KernelInputError, match=r"block_table\[1, 2\] = 20 is not a page of the pool \(0\.\.19\), "
                                               r"and sequence 1 \(64 keys, 4 pages of 16\) reads it"):
        ch09.validate(**ops)
    ops["block_table"][1, 2] = -1
    with pytest.raises(KernelInputError, match=r"block_table\[1, 2\] = -1"):
        ch09.validate(**ops)
    ops["seq_lens"] = np.array([64, 32], np.int32)        # page 2 of sequence 1 unused now: -1 there is fine
    ch09.validate(**ops)
    ops["seq_lens"] = np.array([65, 32], np.int32)
    with pytest.raises(KernelInputError, match=r"seq_lens\[0\] = 65 exceeds the block table's capacity 64 keys "
                                               r"\(4 pages x page 16\)"):
        ch09.validate(**ops)
    ops = _ops(paged=True, P=24)
    with pytest.raises(KernelInputError, match="page size P = 24"):
        ch09.validate(**ops)
    ops = _ops(paged=True)
    ops["block_table"] = np.zeros((3, 4), np.int32)
    with pytest.raises(KernelInputError, match=r"block_table has shape \(3, 4\): one row per sequence"):
        ch09.validate(**ops)
    ops["block_table"] = np.zeros((2, 4), np.int64)
    with pytest.raises(KernelInputError, match="block_table has dtype int64, expected int32"):
        ch09.validate(**ops)


def test_launcher_refuses_the_wrong_layout_and_host_arrays_before_any_launch():
    ops = _ops()
    ops.pop("block_table")
    with pytest.raises(KernelInputError, match="rung paged reads a paged cache: pass block_table"):
        ch09.launcher(**ops, version="paged")
    with pytest.raises(KernelInputError, match="rung split_kv reads a contiguous cache"):
        ch09.launcher(**ops, version="split_kv", block_table=np.zeros((2, 4), np.int32))
    with pytest.raises(KernelInputError, match="no decode version 'flash'"):
        ch09.launcher(**ops, version="flash")
    pytest.importorskip("cupy")
    with pytest.raises(KernelInputError, match="q must be a CuPy array on the GPU, got ndarray"):
        ch09.launcher(**ops, version="split_kv")


# --------------------------------------------------------------------------------------- compiles

@pytest.mark.parametrize("name", list(ch09.rungs()))
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_rung_compiles_without_spills_for_every_group_and_head_dim(name, arch):
    pytest.importorskip("cupy")
    rung = ch09.rungs()[name]
    for G, d in ch09.CHECK_GD:
        rep = ch09.compile_report(rung, arch, G, d)
        assert rung.function in rep.functions, f"{name} G{G} d{d} [{arch}]: {list(rep.functions)}"
        assert ("decode_merge" in rep.functions) == rung.merge, f"{name}: {list(rep.functions)}"
        for fn in rep.functions.values():
            assert fn.spills == 0, f"{name} G{G} d{d} [{arch}] {fn.name} spills {fn.spill_stores}/{fn.spill_loads}"
            assert 0 < fn.registers <= 255


@pytest.mark.parametrize("mode", [[], ["--batch1"]])
def test_the_h200_sweep_runs_its_own_logic_on_the_cpu(mode, tmp_path):
    """The sweep script's CPU stand-in (DEC09_SMOKE=1): children, checks, rung 05's repeat check and counters, the
    split-only timing, the JSON; its figures mean nothing."""
    import json
    import os
    import subprocess
    import sys
    from labkit.paths import KERNELS
    script = KERNELS.parent / "labs" / "results" / "logs" / "2026-12-01" / "decode-attention-sweep.py"
    run = subprocess.run([sys.executable, str(script), *mode, str(tmp_path)], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, DEC09_SMOKE="1"))
    assert run.returncode == 0 and "\n0 errors;" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    res = json.loads((tmp_path / ("decode-attention-batch1.json" if mode else "decode-attention.json")).read_text())
    assert all(r.get("ok") for r in res["preflight"].values())
    fused = [r for r in res["ladder"] if r["kernel"].startswith("fused_merge[")]
    assert fused and all(r["ok"] for r in fused)
    assert all(c.get("repeat_ok") for lab, r in res["preflight"].items() if lab.startswith("fused_merge")
               for c in r["checks"])
    if mode:
        assert res["merge_cost"] and any(r.get("split_only") for r in res["ladder"])
        assert {33, 3} & {r["nsplit"] for r in fused}


# --------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ch09.rungs()))
def test_each_rung_on_the_irregular_cases(name):
    """Lengths 0, 1, 7, 4097 and mixed in one batch, pages 16/64/256 with holes and shuffled pages, groups
    1/4/8, d 64/128, nsplit 1/3/16; poisoned, canary-padded outputs and workspace."""
    ctx = Context({}, {"sm_count": 0}, quick=True)
    ch09.check_all(ctx, names=[name])
    assert len(ctx.log) == len(ch09.CHECK_GD) * len(ch09.CHECK_CASES) * (3 if ch09.rungs()[name].splits else 1)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["split_kv", "paged", "paged_mma", "fused_merge"])
def test_an_empty_split_merges_as_nothing_on_the_gpu(name):
    """Seven keys in 16 splits: splits 1..15 are empty (lse -inf, o 0 in the workspace), and the merged output
    and LSE are bit for bit those of one split."""
    rung = ch09.build(ch09.rungs()[name], 8, 128)
    case = ch09.make_case([7, 0], Hkv=2, G=8, d=128, page=16, seed=5)
    o1, l1, _, _ = ch09.run_case(rung, case, 1)
    o16, l16, wo, wl = ch09.run_case(rung, case, 16)
    for g in (o1, l1, o16, l16, wo, wl):
        assert g.problems() == []
    assert np.array_equal(o16.array.get(), o1.array.get())
    assert np.array_equal(l16.array.get(), l1.array.get())
    ws_l, ws_o = wl.values(), wo.values()
    assert np.isneginf(ws_l[0, :, 1:]).all() and (ws_o[0, :, 1:] == 0).all()
    assert np.isneginf(ws_l[1]).all()                       # the empty sequence: every split empty
    assert (o16.values()[1] == 0).all() and np.isneginf(l16.values()[1]).all()
    assert ch09.mismatches(o16.values(), l16.values(), case.ref) == []


def _fused_operands(case):
    import cupy as cp
    from labkit.measure.checks import GuardedOutput
    B, Hq, Hkv, d = case.shape
    out, lse = GuardedOutput((B, Hq, d), "bfloat16"), GuardedOutput((B, Hq), "float32")
    ops = dict(q=cp.asarray(case.q), K=cp.asarray(case.Kp), V=cp.asarray(case.Vp), seq_lens=cp.asarray(case.lens),
               out=out.array, lse=lse.array, block_table=cp.asarray(case.bt))
    return ops, out, lse


@pytest.mark.gpu
def test_fused_merge_leaves_its_counters_zero_and_repeats_bit_for_bit():
    """One counters array across launches and split counts: every launch finds it zero and leaves it zero (the
    last split of each (sequence, KV head) resets it), so a second launch into poisoned outputs merges again and
    writes the same bits; a counter left at nsplit would leave the outputs poisoned."""
    import cupy as cp
    rung = ch09.build(ch09.rungs()["fused_merge"], 8, 128)
    case = ch09.make_case([0, 1, 7, 16, 33, 300, 1000, 2049, 4097], Hkv=2, G=8, d=128, page=16, seed=11)
    B, Hq, Hkv, d = case.shape
    ops, out, lse = _fused_operands(case)
    counters = cp.zeros((B, Hkv), dtype=cp.int32)
    for ns in (16, 3, 33, 16):
        ws = (cp.empty((B, Hq, ns, d), cp.float32), cp.empty((B, Hq, ns), cp.float32), counters)
        run = ch09.launcher(**ops, rung=rung, nsplit=ns, workspace=ws)
        got = []
        for _ in range(2):
            out.poison()
            lse.poison()
            run()
            cp.cuda.Device().synchronize()
            assert out.problems() == [] and lse.problems() == [], f"nsplit {ns}"
            assert int(cp.count_nonzero(counters)) == 0, f"nsplit {ns}: counters {counters.get().tolist()}"
            got.append((out.array.get(), lse.array.get()))
        assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1]), f"nsplit {ns}"
        assert ch09.mismatches(out.values(), lse.values(), case.ref) == [], f"nsplit {ns}"
    run = ch09.launcher(**ops, rung=rung, nsplit=16)          # counters of its own, zeroed once and kept
    for _ in range(3):
        out.poison()
        run()
        cp.cuda.Device().synchronize()
        assert out.problems() == [] and np.array_equal(out.array.get(), got[0][0])


@pytest.mark.gpu
@pytest.mark.parametrize("G, d", [(8, 128), (1, 64)])
def test_fused_merge_moves_its_table_window_along_a_long_split(G, d):
    """4 warps (64-key stages) and a 64-entry window (BT_PAGES = 64, the smallest a 64-key stage allows): 4097 keys
    in pages of 16 or 64 are 257 or 65 pages, so splits of 1 and 3 move their window while the ring runs."""
    rung = ch09.build(ch09.rungs()["fused_merge"], G, d, WARPS=4, STAGES=4, BT_PAGES=64)
    for lens, Hkv, page in (([4097], 2, 64), ([0, 1, 7, 16, 33, 300, 1000, 2049, 4097], 2, 16)):
        case = ch09.make_case(lens, Hkv, G, d, page, seed=21)
        for ns in (1, 3, 16):
            o, l, wo, wl = ch09.run_case(rung, case, ns)
            problems = o.problems() + l.problems() + (wo.problems() + wl.problems() if wo is not None else [])
            assert problems == [], (page, ns, problems)
            assert ch09.mismatches(o.values(), l.values(), case.ref) == [], (page, ns)


@pytest.mark.gpu
def test_fused_merge_refuses_what_its_kernel_cannot_take():
    import cupy as cp
    case = ch09.make_case([100, 5], Hkv=1, G=8, d=128, page=16, seed=2)
    ops, _, _ = _fused_operands(case)
    with pytest.raises(KernelInputError, match="nsplit = 257: an integer from 1 to 256 for rung fused_merge"):
        ch09.launcher(**ops, version="fused_merge", nsplit=257)
    ws = (cp.empty((2, 8, 4, 128), cp.float32), cp.empty((2, 8, 4), cp.float32))
    with pytest.raises(KernelInputError, match=r"counters has shape \(1, 2\), expected \(2, 1\)"):
        ch09.launcher(**ops, version="fused_merge", nsplit=4, workspace=ws + (cp.zeros((1, 2), cp.int32),))
    with pytest.raises(KernelInputError, match="counters has dtype int64, expected int32"):
        ch09.launcher(**ops, version="fused_merge", nsplit=4, workspace=ws + (cp.zeros((2, 1), cp.int64),))
    with pytest.raises(KernelInputError, match=r"workspace: \(ws_o, ws_lse\), got 3 arrays"):
        ch09.launcher(**ops, version="paged_mma", nsplit=4, workspace=ws + (cp.zeros((2, 1), cp.int32),))
