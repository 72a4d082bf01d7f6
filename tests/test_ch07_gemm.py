"""Chapter 07 (Hopper GEMM): SASS of every rung, wgmma serialisation caught at compile time, tensor-map
argument rules, the lab's variants; on an H200, the tensor maps, the wgmma roof and the wrappers."""
import numpy as np
import pytest

from labkit.chapters import ch07
from labkit.errors import KernelCompileError, KernelInputError


@pytest.mark.parametrize("name", list(ch07.rungs()))
def test_the_sass_of_each_rung_holds_the_hopper_instructions(name):
    counts = ch07.check_sass(ch07.rungs()[name])
    assert counts["HMMA"] == 0            # no Ampere-style fallback


def test_sass_check_fails_on_a_kernel_without_them():
    rung = ch07.Rung("tma_ring", "07-gemm-hopper/00_wgmma_probe.cu", "wgmma_probe")
    with pytest.raises(Exception, match="UTMALDG"):
        ch07.check_sass(rung)


SERIALISED = r"""// requires: sm_90a
#include "common/wgmma.cuh"
extern "C" __global__ void __launch_bounds__(128) k(float* out, unsigned long long da, unsigned long long db, int n)
{
    float acc[64];
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    wgmma_fence();
    for (int i = 0; i < n; ++i) {
        wgmma_m64n128k16(acc, da, db);
        acc[i & 63] += 1.f;          // an accumulator touched while wgmma is in flight
    }
    wgmma_commit();
    wgmma_wait<0>();
    for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = acc[i];
}
"""


def test_compile_check_fails_a_build_whose_wgmma_ptxas_serialised():
    from labkit.measure.compile import compile_check
    with pytest.raises(KernelCompileError, match="serialised wgmma"):
        compile_check(SERIALISED, "sm_90a")


@pytest.mark.parametrize("kw, msg", [
    (dict(ptr=0x1008), "16-byte aligned"),
    (dict(strides=(100, 2)), "multiple of 16"),
    (dict(box_rows=300), "1 .. 256"),
    (dict(box_cols=128), "at most 128 bytes"),
    (dict(box_cols=4), "multiple of 16"),
    (dict(swizzle=96), "one of 0, 32, 64, 128"),
    (dict(itemsize=4), "2-byte"),
])
def test_tensor_map_arguments_are_checked_with_a_clear_message(kw, msg):
    from labkit.measure.tensormap import check_tensor_map_args
    args = dict(shape=(512, 256), strides=(512, 2), itemsize=2, ptr=0x10000, box_rows=128, box_cols=64, swizzle=128)
    args.update(kw)
    with pytest.raises(KernelInputError, match=msg):
        check_tensor_map_args(args["shape"], args["strides"], args["itemsize"], args["ptr"], args["box_rows"],
                              args["box_cols"], args["swizzle"])
    ok = dict(args, **{k: v for k, v in dict(shape=(512, 256), strides=(512, 2), itemsize=2, ptr=0x10000,
                                               box_rows=128, box_cols=64, swizzle=128).items() if k in kw})
    check_tensor_map_args(ok["shape"], ok["strides"], ok["itemsize"], ok["ptr"], ok["box_rows"], ok["box_cols"],
                          ok["swizzle"])


def test_pipeline_variants_fit_in_shared_memory():
    vs = [v for v in ch07.variants() if "STAGES" in dict(v.macros)]
    assert {dict(v.macros)["STAGES"] for v in vs} == {2, 3, 4}
    assert dict(ch07.variants()[0].macros) == {"IN_FLIGHT": 0}
    assert ch07.stage_bytes() == 48 * 1024
    assert all(1024 + dict(v.macros)["STAGES"] * ch07.stage_bytes(BN=dict(v.macros)["BN"]) <= 227 * 1024
               for v in vs)


# ----------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_tensor_maps_match_the_driver_bindings():
    """labkit's ctypes call gives the same 128 bytes as NVIDIA's cuda.bindings for the same arguments."""
    import cupy as cp
    from cuda.bindings import driver as cu
    from labkit.measure.tensormap import tensor_map
    a = cp.zeros((1000, 264), dtype=cp.uint16)
    mine = tensor_map(a, 128, 64, 128)["w"]
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    err, t = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, u32(2), int(a.data.ptr), [u64(264), u64(1000)],
        [u64(528)], [u32(64), u32(128)], [u32(1), u32(1)], cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B, cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    assert int(err) == 0
    op = t.opaque
    theirs = [int(x) for x in op] if len(op) == 16 else list(np.frombuffer(bytes(op), dtype=np.uint64))
    assert [int(x) for x in mine] == theirs


@pytest.mark.gpu
def test_wgmma_probe_is_above_the_mma_sync_probe():
    from labkit.measure import ceilings
    w = ceilings.measure_wgmma()["wgmma_tflops"]
    m = ceilings.measure_mma()["mma_tflops"]
    assert w > 1.2 * m, (w, m)


@pytest.mark.gpu
def test_wrappers_name_what_breaks_the_contract():
    import cupy as cp
    from labkit.chapters.ch06 import random_bf16
    A, B_t, C = random_bf16((64, 64)), random_bf16((60, 64)), cp.empty((64, 60), dtype=cp.uint16)
    with pytest.raises(KernelInputError, match="multiples of 8"):
        ch07.gemm(A, B_t, C)
    with pytest.raises(KernelInputError, match="columns"):
        ch07.gemm(A, random_bf16((64, 32)), cp.empty((64, 64), dtype=cp.uint16))


@pytest.mark.gpu
def test_every_rung_on_an_irregular_shape_and_a_short_persistent_grid():
    from labkit.measure.context import Context
    ctx = Context({}, {"sm_count": 0})
    for rung in ch07.rungs().values():
        ch07.check_rung(ctx, rung, 333, 264, 200)
        ch07.check_rung(ctx, rung, 2600, 4360, 328, grid_cap=8)
    assert len(ctx.log) == 2 * len(ch07.rungs())


def test_the_profiler_finds_kernels_behind_launch_bounds_and_attribute_macros():
    from labkit.runner.profile import kernel_names
    assert {"gemm_tma_ring", "gemm_cluster_multicast", "gemm_tma_store", "gemm_persistent"} <= kernel_names("07")
    assert "CLUSTER_ATTR" not in kernel_names("07")
