"""Chapter 08 (FlashAttention forward): the FLOP and byte arithmetic, the merge of two online-softmax states
on NumPy cases, the grid's limits, every rung compiling without spills for both head dims; on a GPU, every
rung on the irregular shapes (causal and not, S = 1 to 4097), the input checks' messages before any launch,
the default rung against the reference, and the Hopper rung's refusal elsewhere."""
import math

import numpy as np
import pytest

from labkit.chapters import ch08
from labkit.errors import KernelInputError
from labkit.measure.context import Context


# --------------------------------------------------------------------------------------- arithmetic

def test_flops_and_bytes_of_the_headline_shape():
    assert ch08.flops(16, 16, 4096, 128, False) == 4 * 16 * 16 * 4096 ** 2 * 128 == 2_199_023_255_552
    assert ch08.flops(16, 16, 4096, 128, True) * 2 == ch08.flops(16, 16, 4096, 128, False)
    # Q, K, V read, O written (bf16) and the LSE (fp32): 256 MiB for each of the four tensors
    assert ch08.fused_bytes(16, 16, 4096, 128) == 4 * 2 ** 28 + 16 * 16 * 4096 * 4
    # the unfused path adds the S x S scores and P, each written and read once in bf16
    assert ch08.naive_bytes(1, 1, 1024, 64) - ch08.fused_bytes(1, 1, 1024, 64) == 4 * 1024 * 1024 * 2
    assert ch08.shape_key(16, 16, 4096, 128, True) == "16x16x4096x128x1"
    assert ch08.HEADLINE["attention_fwd"] == ch08.shape_key(*ch08.BENCH_SHAPES[0])


def _softmax_state(s, v):
    m = s.max()
    p = np.exp(s - m)
    return m, p.sum(), p @ v


@pytest.mark.parametrize("cut", [1, 7, 63])
def test_merging_two_states_is_the_softmax_of_all_keys(cut):
    rng = np.random.default_rng(cut)
    s, v = rng.standard_normal(64) * 4, rng.standard_normal((64, 16))
    m, l, o = ch08.merge_states(*_softmax_state(s[:cut], v[:cut]), *_softmax_state(s[cut:], v[cut:]))
    p = np.exp(s - s.max())
    assert np.allclose(o / l, (p / p.sum()) @ v, rtol=1e-12, atol=1e-12)
    assert math.isclose(m + math.log(l), s.max() + math.log(p.sum()), rel_tol=1e-12)


def test_a_state_with_no_keys_merges_as_nothing():
    rng = np.random.default_rng(3)
    s, v = rng.standard_normal(9), rng.standard_normal((9, 4))
    m, l, o = _softmax_state(s, v)
    got = ch08.merge_states(np.array(-np.inf), np.array(0.0), np.zeros(4), np.array(m), np.array(l), o)
    assert got[0] == m and got[1] == l and np.array_equal(got[2], o)
    empty = ch08.merge_states(np.array(-np.inf), np.array(0.0), np.zeros(4), np.array(-np.inf), np.array(0.0),
                              np.zeros(4))
    assert np.isneginf(empty[0]) and empty[1] == 0 and not np.isnan(empty[2]).any()


def test_the_grid_covers_the_queries_and_refuses_too_many_heads():
    g = ch08.Geometry(block_m=128, block_n=64, threads=128, smem=98304, head_dim=128, stages=2, warps=4, swizzle=1)
    assert g.grid(16, 16, 4096) == (32, 256, 1)
    assert g.grid(1, 1, 4097) == (33, 1, 1)
    with pytest.raises(KernelInputError, match="B x H = 65536: at most 65535"):
        g.grid(256, 256, 128)


def test_the_ladder():
    names = list(ch08.rungs())
    assert names == ["fused_simt", "mma", "exp2", "causal_skip", "pipelined", "wide_warps", "wgmma"]
    assert ch08.BEST in names and ch08.BEST not in ch08.HOPPER_ONLY
    assert [r.name for r in ch08.RUNGS if ch08.is_hopper_only(r)] == ["wgmma"]
    built = ch08.build(ch08.rungs()["wgmma"], 64)
    assert dict(built.macros) == {"HEAD_DIM": 64}
    assert ch08.build(ch08.Rung("x", "p", "f", (("STAGES", 3),)), 128).macros == (("HEAD_DIM", 128), ("STAGES", 3))


# --------------------------------------------------------------------------------------- compiles

@pytest.mark.parametrize("name", list(ch08.rungs()))
@pytest.mark.parametrize("d", [64, 128])
def test_every_rung_compiles_without_spills(name, d):
    pytest.importorskip("cupy")
    from labkit.measure.compile import compile_check
    rung = ch08.rungs()[name]
    archs = ["sm_90a"] if ch08.is_hopper_only(rung) else ["sm_80", "sm_90"]
    for arch in archs:
        rep = compile_check(rung.path, arch, ch08.options(ch08.build(rung, d).macros))
        assert rung.function in rep.functions, f"{name} d{d} [{arch}]: {list(rep.functions)}"
        for fn in rep.functions.values():
            assert fn.spills == 0, f"{name} d{d} [{arch}] {fn.name} spills {fn.spill_stores}/{fn.spill_loads}"
            assert 0 < fn.registers <= 255


# --------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name", list(ch08.rungs()))
def test_each_rung_on_the_irregular_shapes(name):
    """S = 1, 17, 129, 200, 1000, 4097 with d = 64 and 128, causal and not, B x H from 1 to 128; fresh random
    inputs, poisoned and canary-padded O and LSE, against the fp32 reference with the chapter's tolerance."""
    rung = ch08.rungs()[name]
    if not ch08.runs_here(rung):
        pytest.skip("wgmma and TMA need a Hopper GPU (compute capability 9.0)")
    ctx = Context({}, {"sm_count": 0}, quick=True)
    ch08.check_all(ctx, names=[name])
    assert len(ctx.log) == len(ch08.CHECK_SHAPES) and all(line.startswith("ok  ") for line in ctx.log)


@pytest.mark.gpu
def test_the_default_rung_matches_the_reference_with_planted_large_scores():
    """A query aligned with an earlier key (a score of ~45 after scaling, seen by causal rows too): exp without
    the running max overflows."""
    import cupy as cp
    from labkit.measure import bf16
    B, H, S, d = 1, 2, 333, 128
    Q, K, V = ch08.random_qkv(B, H, S, d)
    q = bf16.from_bits(Q)
    k = bf16.from_bits(K)
    k[0, 1, 20] = q[0, 1, 50] * 4
    K = bf16.to_bits(k)
    for causal in (False, True):
        O = cp.full((B, H, S, d), 0x7FC0, dtype=cp.uint16)
        L = cp.full((B, H, S), cp.nan, dtype=cp.float32)
        ch08.attention(Q, K, V, O, L, causal)
        ref_o, ref_lse, sd = ch08.reference(Q, K, V, causal)
        assert ch08.mismatches(bf16.from_bits(O), L, ref_o, ref_lse, sd) == []
        assert float(ref_lse[0, 1, 50]) > 30


@pytest.mark.gpu
def test_bad_operands_are_named_before_any_launch():
    import cupy as cp
    Q = cp.zeros((1, 2, 64, 128), dtype=cp.uint16)
    O = cp.zeros_like(Q)
    L = cp.zeros((1, 2, 64), dtype=cp.float32)
    with pytest.raises(KernelInputError, match="Q has dtype float16, expected uint16"):
        ch08.attention(Q.view(cp.float16), Q, Q, O, L)
    with pytest.raises(KernelInputError, match=r"K has shape \(1, 2, 63, 128\), expected \(1, 2, 64, 128\)"):
        ch08.attention(Q, Q[:, :, :63].copy(), Q, O, L)
    with pytest.raises(KernelInputError, match="head dim d = 96"):
        q96 = cp.zeros((1, 2, 64, 96), dtype=cp.uint16)
        ch08.attention(q96, q96, q96, q96.copy(), L)
    with pytest.raises(KernelInputError, match=r"LSE has shape \(1, 2\), expected \(1, 2, 64\)"):
        ch08.attention(Q, Q, Q, O, L[:, :, 0].copy())
    with pytest.raises(KernelInputError, match="V must be a CuPy array on the GPU"):
        ch08.attention(Q, Q, Q.get(), O, L)
    with pytest.raises(KernelInputError, match="no attention version 'fast'"):
        ch08.attention(Q, Q, Q, O, L, version="fast")


@pytest.mark.gpu
def test_the_hopper_rung_is_refused_by_name_on_other_gpus():
    from labkit.measure.device import gpu_info
    if gpu_info()["compute_capability"] == "9.0":
        assert ch08.runs_here(ch08.rungs()["wgmma"])
        return
    import cupy as cp
    Q = cp.zeros((1, 1, 64, 128), dtype=cp.uint16)
    with pytest.raises(Exception, match="Hopper|9.0|sm_90a"):
        ch08.attention(Q, Q, Q, Q.copy(), cp.zeros((1, 1, 64), dtype=cp.float32), version="wgmma")
