"""Chapter 10's capstone, the fused cross-entropy: its fp64 reference against the definition, the checks
that must catch a wrong gradient, its kernels' builds (CPU), and both versions on the GPU (marked gpu)."""
from __future__ import annotations

import numpy as np
import pytest

from labkit.chapters import ch10
from labkit.errors import KernelInputError
from labkit.measure import bf16
from labkit.measure.compile import compile_check
from labkit.paths import KERNELS


def _logits(N, V, seed=0):
    rs = np.random.default_rng(seed)
    return bf16.to_bits(rs.standard_normal((N, V)).astype(np.float32) * 3)


def test_the_reference_gradient_is_the_derivative_of_the_mean_loss():
    N, V = 4, 9
    x_bits = _logits(N, V)
    t = np.array([0, 8, ch10.IGNORE_INDEX, 3], dtype=np.int32)
    loss, lse, grad, mean = ch10.reference(x_bits, t)
    x = bf16.from_bits(x_bits).astype(np.float64)

    def mean_loss(z):
        keep = t != ch10.IGNORE_INDEX
        lz = np.log(np.exp(z).sum(axis=1))
        return np.mean((lz - z[np.arange(N), np.where(keep, t, 0)])[keep])

    assert mean == pytest.approx(mean_loss(x))
    h, num = 1e-6, np.zeros_like(x)
    for i in range(N):
        for j in range(V):
            zp, zm = x.copy(), x.copy()
            zp[i, j] += h
            zm[i, j] -= h
            num[i, j] = (mean_loss(zp) - mean_loss(zm)) / (2 * h)
    np.testing.assert_allclose(grad, num, atol=1e-8)
    assert loss[2] == 0 and not grad[2].any()                  # the ignored row
    np.testing.assert_allclose(lse, np.log(np.exp(x).sum(axis=1)))


def test_every_row_ignored_gives_a_nan_mean_and_no_gradient():
    t = np.full(3, ch10.IGNORE_INDEX, dtype=np.int32)
    loss, _, grad, mean = ch10.reference(_logits(3, 5), t)
    assert np.isnan(mean) and not grad.any() and not loss.any()


def test_the_checks_catch_a_wrong_gradient_and_name_the_element():
    x_bits, t = _logits(3, 16, 1), np.array([1, 2, 3], dtype=np.int32)
    ref = ch10.reference(x_bits, t)
    loss, lse, grad, mean = (a.copy() if isinstance(a, np.ndarray) else a for a in ref)
    assert ch10.mismatches(loss, lse, grad, mean, ref) == []
    bad = grad.copy()
    bad[2, 3] += 3e-3                                           # 1% off: past the half-ulp of bf16
    assert ch10.mismatches(loss, lse, bad, mean, ref) == [
        f"grad: 1 of 48 elements wrong; first [2, 3]: expected {ref[2][2, 3]:.6g}, got {bad[2, 3]:.6g}"]
    forgot = grad.copy()
    forgot[np.arange(3), t] += 1 / 3                            # no one-hot subtraction at all
    assert any(p.startswith("grad: 3 of 48") for p in ch10.mismatches(loss, lse, forgot, mean, ref))
    assert ch10.mismatches(loss + 1e-2, lse, grad, mean, ref)[0].startswith("loss: 3 of 3 rows wrong")
    nan = grad.copy()
    nan[0, 0] = np.nan
    assert ch10.mismatches(loss, lse, nan, mean, ref)[0].startswith("grad: 1 of 48 elements wrong; first [0, 0]")
    assert ch10.mismatches(loss, lse, grad, mean + 1, ref)[0].startswith("loss_mean: expected")
    assert ch10.mismatches(loss, lse, grad, None, ref) == []          # the mean left unchecked
    assert ch10.mismatches(loss, lse, grad, float("nan"), ref) == ["loss_mean: expected "
                                                                    f"{ref[3]:.6g}, got nan"]


def test_random_targets_keep_both_ends_and_spread_the_ignored_rows():
    t = ch10.random_targets(10, 50, 3, 0)
    assert t[0] == 0 and t[1] == 49 and (t == ch10.IGNORE_INDEX).sum() == 3 and t[9] == ch10.IGNORE_INDEX
    assert ((t >= 0) & (t < 50) | (t == ch10.IGNORE_INDEX)).all()
    with pytest.raises(ValueError, match="2 ignored rows need N >= 4"):
        ch10.random_targets(3, 5, 2, 0)
    for N, V, ign in ch10.CHECK_CASES:
        assert (ch10.random_targets(N, V, ign, 1) == ch10.IGNORE_INDEX).sum() == ign


def test_the_floor_is_one_read_and_one_write_of_the_logits():
    assert ch10.ce_bytes(4096, 128256) == 4 * 4096 * 128256 + 12 * 4096
    assert ch10.HEADLINE[ch10.OP] == "4096x128256" and tuple(ch10.SHAPES[0]) == (4096, 128256)


def test_the_fused_build_follows_the_rows_in_flight():
    # H200: 132 SMs, 60 MiB of L2. Two 512-thread blocks per SM while 2 x 132 rows take half the L2 or less
    l2 = 60 * 2**20
    hinted = (1024, 1, ("-DPREFETCH=2", "-DHINTS=1"))
    assert ch10.fused_build(32000, 132, l2) == (512, 2, ())      # 16.9 MB in flight
    assert ch10.fused_build(128256, 132, l2) == hinted           # 67.7 MB would be
    edge = l2 // 2 // (2 * 132 * 2)
    assert ch10.fused_build(edge, 132, l2) == (512, 2, ()) and ch10.fused_build(edge + 1, 132, l2) == hinted


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("version", sorted(ch10.VERSIONS))
def test_the_kernels_build_without_spills(version, arch):
    v = ch10.VERSIONS[version]
    report = compile_check((KERNELS / v.path).read_text(), arch)
    for name in v.kernels:
        assert report.functions[name].spills == 0, (version, arch, name)
    if version == "fused":
        assert report.functions["ce_fused"].registers <= 64      # 1024 threads, one block per SM


# ------------------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("version", sorted(ch10.VERSIONS))
def test_every_case_out_of_place_and_in_place(version):
    from labkit.measure.context import Context
    from labkit.measure import ceilings
    from labkit.measure.device import gpu_info
    ctx = Context(ceilings.measure(verbose=False), gpu_info(), quick=True)
    ch10.check_all(ctx, versions=(version,))
    assert sum(line.startswith("ok  cross_entropy") for line in ctx.log) >= 2 * len(ch10.CHECK_CASES)


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 256])
def test_smaller_blocks_of_the_fused_kernel(threads):
    for i, (N, V, ign) in enumerate(ch10.CHECK_CASES):
        assert ch10.check_case("fused", N, V, ign, 50 + i, threads=threads, blocks=5) == [], (N, V, threads)


@pytest.mark.gpu
def test_bad_arguments_get_a_clear_error():
    import cupy as cp
    N, V = 4, 64
    x = cp.asarray(_logits(N, V))
    g, loss, lse, mean = cp.empty_like(x), cp.empty(N, cp.float32), cp.empty(N, cp.float32), cp.empty(1, cp.float32)
    t = cp.asarray(np.array([0, 1, 2, 64], dtype=np.int32))
    with pytest.raises(KernelInputError, match=r"target\[3\] = 64: each target must be in \[0, 64\) or "
                                               r"ignore_index \(-100\)"):
        ch10.cross_entropy(x, t, g, loss, lse, mean)
    t = cp.asarray(np.array([0, 1, 2, 3], dtype=np.int32))
    with pytest.raises(KernelInputError, match="target has dtype int64, expected int32"):
        ch10.cross_entropy(x, t.astype(cp.int64), g, loss, lse, mean)
    with pytest.raises(KernelInputError, match=r"grad has shape \(4, 63\), expected \(4, 64\)"):
        ch10.cross_entropy(x, t, g[:, :63].copy(), loss, lse, mean)
    with pytest.raises(KernelInputError, match="grad overlaps x without being x"):
        big = cp.empty((N + 1, V), cp.uint16)
        big[:N] = x
        ch10.cross_entropy(big[:N], t, big[1:], loss, lse, mean)
    with pytest.raises(KernelInputError, match="version 'fast': one of two_pass, fused"):
        ch10.cross_entropy(x, t, g, loss, lse, mean, version="fast")
    with pytest.raises(KernelInputError, match="vocabulary"):
        ch10.cross_entropy(cp.empty((4, 0), cp.uint16), t, cp.empty((4, 0), cp.uint16), loss, lse, mean)
