"""Chapter 06 (mma.sync GEMM): fragment layouts, the tuning space and the wrappers; the GPU tests run the
fragment probe and the contract checks on the tensor cores."""
import numpy as np
import pytest

from labkit.chapters import ch06
from labkit.measure import compile


@pytest.mark.parametrize("which", ["A", "B", "C"])
def test_every_fragment_element_has_exactly_one_owner(which):
    f, shape = ch06.FRAGMENTS[which]
    seen = [rc for lane in range(32) for rc in f(lane)]
    assert len(seen) == len(set(seen)) == shape[0] * shape[1]
    assert all(0 <= r < shape[0] and 0 <= c < shape[1] for r, c in seen)


def test_fragment_layout_entries_from_the_ptx_isa_table():
    # lane 5: groupID 1, threadID_in_group 1
    assert ch06.fragment_a(5) == [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    assert ch06.fragment_b(5) == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert ch06.fragment_c(5) == [(1, 2), (1, 3), (9, 2), (9, 3)]
    assert ch06.owners("C")[15, 7] == 31 * 8 + 3


def test_index_tables_follow_the_fragment_functions():
    ta, tb, tc = ch06.index_tables()
    assert ta.shape == (256,) and tb.shape == (128,) and tc.shape == (128,)
    assert sorted(ta) == list(range(256)) and sorted(tb) == list(range(128)) and sorted(tc) == list(range(128))
    assert ta[8 * 5 + 4] == 1 * 16 + 10 and tb[4 * 5 + 2] == 10 * 8 + 1


def test_tuning_configurations_fit_and_start_with_the_tuned_one():
    configs = ch06.tuning_configs()
    assert configs[0] == ch06.TUNED
    assert len(configs) >= 12 and all(ch06.fits(c) for c in configs)
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)
    assert ch06.smem_bytes(ch06.TUNED) == 5 * (256 * 32 + 32 * 128) * 2
    assert not ch06.fits({**ch06.TUNED, "STAGES": 9})            # the file allows 2..8
    assert not ch06.fits({**ch06.TUNED, "BK": 16})               # one k-step per k-tile: the file refuses it


def test_the_tuned_build_compiles_without_spills():
    from labkit.measure.compile import compile_check
    for arch in ("sm_80", "sm_90"):
        rep = compile_check(ch06.RASTERIZED, arch, ch06.options(ch06.TUNED))
        fn = rep.functions["gemm_rasterized"]
        assert fn.spills == 0 and fn.registers <= 255, (arch, fn)


def test_tolerance_scales_with_k_and_the_operands():
    a, b = np.ones((4, 1024)), np.full((1024, 4), 2.0)
    r1, t1 = ch06.tolerance(1024, a, b)
    r2, t2 = ch06.tolerance(2048, a, b)
    assert r1 == r2 == 2.0 ** -8 and t2 == pytest.approx(2 * t1) and t1 == pytest.approx(8 * 1024 * 2 * 2.0 ** -23)


def test_block_and_warp_arithmetic():
    assert ch06.block_intensity(128, 256) == pytest.approx(85.33, rel=1e-3)
    assert ch06.warp_smem_bytes_per_flop(64, 64) == pytest.approx(1 / 32)


# ----------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_fragment_functions_are_the_hardware_layout():
    from labkit.measure.context import Context
    ctx = Context({}, {"sm_count": 0})
    ch06.check_fragments(ctx)
    assert ctx.log[-1].startswith("ok")


@pytest.mark.gpu
@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_wrong_fragment_table_gives_a_wrong_product(which):
    """The probe can fail: two lanes' entries swapped in one table break C = A @ B."""
    tables = [t.copy() for t in ch06.index_tables()]
    per = (8, 4, 4)[which]
    t = tables[which]
    t[0:per], t[per:2 * per] = t[per:2 * per].copy(), t[0:per].copy()
    A, B = ch06.random_bf16((16, 16)), ch06.random_bf16((16, 8))
    from labkit.measure import bf16
    ref = bf16.from_bits(A).get().astype(np.float64) @ bf16.from_bits(B).get().astype(np.float64)
    got = ch06.fragment_product(A, B, tables).get()
    assert not np.allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert np.allclose(ch06.fragment_product(A, B).get(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_the_wrappers_name_what_breaks_the_contract():
    import cupy as cp
    from labkit.errors import KernelInputError
    A, B, C = ch06.random_bf16((64, 24)), ch06.random_bf16((24, 64)), cp.empty((64, 64), dtype=cp.uint16)
    ch06.gemm(A, B, C, "multistage")                          # K = 24: fine
    with pytest.raises(KernelInputError, match="multiple of 8"):
        ch06.gemm(ch06.random_bf16((64, 12)), ch06.random_bf16((12, 64)), C)
    buf = ch06.random_bf16(64 * 24 + 1)
    with pytest.raises(KernelInputError, match="aligned"):
        ch06.gemm(buf[1:].reshape(64, 24), B, C)
    with pytest.raises(KernelInputError, match="dtype"):
        ch06.gemm(A.astype(cp.float32), B, C)
    with pytest.raises(KernelInputError, match="rows"):
        ch06.gemm(A, ch06.random_bf16((32, 64)), C)


@pytest.mark.gpu
def test_every_rung_on_an_irregular_shape_and_with_any_n():
    from labkit.measure.context import Context
    ctx = Context({}, {"sm_count": 0})
    for name, rung in ch06.rungs().items():
        ch06.check_rung(ctx, rung, 129, 255, 64)          # N % 8 != 0: the _anyn entry point
        ch06.check_rung(ctx, rung, 300, 264, 520)
    assert len(ctx.log) == 2 * len(ch06.rungs())


@pytest.mark.gpu
def test_a_build_needing_more_shared_memory_than_the_gpu_has_is_refused_by_name(monkeypatch):
    """As on an L4 or RTX 4090 (sm_89: 99 KB per block): the tuned build (120 KB) is refused with the numbers,
    and the checks skip it with a line in the log."""
    import cupy as cp
    from labkit.errors import KernelInputError
    from labkit.measure.context import Context
    monkeypatch.setattr(compile, "max_dynamic_smem", lambda: 99 * 1024)
    ch06._kernel.cache_clear()
    try:
        A, B, C = ch06.random_bf16((256, 64)), ch06.random_bf16((64, 256)), cp.empty((256, 256), dtype=cp.uint16)
        with pytest.raises(KernelInputError, match="122,880 bytes of shared memory per block; this GPU allows 101,376"):
            ch06.gemm(A, B, C, "tuned")
        ch06.gemm(A, B, C, "multistage")                    # 48 KB: fine
        ctx = Context({}, {"sm_count": 0})
        ch06.check_all(ctx, names={"tuned"})
        assert any("tuned: needs more shared memory" in line for line in ctx.log)
    finally:
        ch06._kernel.cache_clear()
