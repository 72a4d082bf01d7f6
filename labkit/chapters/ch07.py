"""Chapter 07: bf16 GEMM on Hopper with wgmma, TMA, mbarrier rings, warp specialisation, persistent blocks and
clusters, against cuBLAS bf16 and the measured wgmma roof. sm_90a only: elsewhere every launch raises a
clear error and the lab shows its recorded outputs.

C (M x N) = A (M x K) @ B_t (N x K)^T, all row-major bf16 (A and B_t both K-major: the "TN" layout of
nn.Linear, the one wgmma reads from shared memory without a transpose), fp32 accumulation, bf16 out.
Contract of every rung: K % 8 == 0 and N % 8 == 0 (16-byte rows for TMA), 16-byte aligned arrays; M, N, K
otherwise arbitrary (TMA fills out-of-bounds boxes with zeros, stores are masked).

Kernels (kernels/07-gemm-hopper/), each exporting its entry point and `launch_config` (the build's
geometry, kernels/common/hopper_launch_config.cuh):
- 00_wgmma_probe.cu        the wgmma roof (labkit.measure.ceilings, `wgmma_tflops`);
- 01_wgmma_smem.cu         wgmma from shared memory, tiles loaded by threads;
- 02_tma_wgmma.cu          tiles loaded by TMA, completion by an mbarrier transaction count;
- 03_tma_ring.cu           a ring of STAGES TMA slots with full/empty mbarriers;
- 04_warp_specialized.cu   a producer warpgroup and two consumer warpgroups, setmaxnreg;
- 05_persistent.cu         one block per SM walking tiles in grouped order;
- 06_cluster_multicast.cu  clusters of 2 along M sharing B tiles by TMA multicast;
- 07_tma_store.cu          the epilogue through shared memory and a TMA store;
- 08_pingpong.cu           ping-pong consumers: each warpgroup owns a 128 x 128 tile, the two take turns
                           on the tensor cores, one's epilogue under the other's MMAs.
"""
from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

from ..errors import CheckFailed, KernelInputError
from ..measure import bf16
from ..measure.checks import GuardedOutput, expect
from ..measure.compile import kernel, load_module, opt_in_shared_memory
from ..measure.tensormap import tensor_map
from ..measure.timing import bench, bench_interleaved, pooled
from .ch06 import agree, random_bf16, tolerance

WGMMA_PROBE = "07-gemm-hopper/00_wgmma_probe.cu"

HEADLINE = {"gemm_bf16": "8192x8192x8192"}
BENCH_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 28672, 8192))
QUICK_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
# tails in M, N and K (TMA zero fill, masked stores), one row, many tiles per persistent block
CHECK_SHAPES = [(1, 8, 8), (128, 256, 64), (256, 256, 128), (333, 264, 200), (1000, 1000, 1008),
                (2600, 4360, 328), (64, 72, 8192)]
FEW_BLOCKS = ((2600, 4360, 328), 8)     # a persistent grid of 8 blocks: ~47 tiles each, the ring carried over


@dataclasses.dataclass(frozen=True)
class Rung:
    name: str
    path: str
    function: str
    macros: tuple = ()


RUNGS = (Rung("wgmma_smem", "07-gemm-hopper/01_wgmma_smem.cu", "gemm_wgmma_smem"),
         Rung("tma_wgmma", "07-gemm-hopper/02_tma_wgmma.cu", "gemm_tma_wgmma"),
         Rung("tma_ring", "07-gemm-hopper/03_tma_ring.cu", "gemm_tma_ring"),
         Rung("tma_ring_bn256", "07-gemm-hopper/03_tma_ring.cu", "gemm_tma_ring", (("BN", 256),)),
         Rung("warp_specialized", "07-gemm-hopper/04_warp_specialized.cu", "gemm_warp_specialized"),
         Rung("persistent", "07-gemm-hopper/05_persistent.cu", "gemm_persistent"),
         Rung("cluster_multicast", "07-gemm-hopper/06_cluster_multicast.cu", "gemm_cluster_multicast"),
         Rung("tma_store", "07-gemm-hopper/07_tma_store.cu", "gemm_tma_store"),
         Rung("pingpong", "07-gemm-hopper/08_pingpong.cu", "gemm_pingpong"))
BEST = "persistent"       # the fastest rung at 8192^3 in the chapter's sweep (gemm-hopper-ladder-sweep.log)
# instructions the SASS of each rung must hold (the Hopper path, not a fallback the compiler chose)
EXPECTED_SASS = {"wgmma_smem": ("HGMMA",), "tma_wgmma": ("HGMMA", "UTMALDG"), "tma_ring": ("HGMMA", "UTMALDG"),
                 "tma_ring_bn256": ("HGMMA", "UTMALDG"), "warp_specialized": ("HGMMA", "UTMALDG", "USETMAXREG"),
                 "persistent": ("HGMMA", "UTMALDG", "USETMAXREG"),
                 "cluster_multicast": ("HGMMA", "UTMALDG.MULTICAST", "USETMAXREG"),
                 "tma_store": ("HGMMA", "UTMALDG.MULTICAST", "UTMASTG", "USETMAXREG"),
                 "pingpong": ("HGMMA", "UTMALDG", "USETMAXREG")}


def rungs() -> dict[str, Rung]:
    return {r.name: r for r in RUNGS}


def options(macros) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in sorted(dict(macros).items()))


def require_hopper() -> None:
    from ..measure.device import gpu_info, require_gpu
    require_gpu("chapter 07's kernels")
    cc = gpu_info()["compute_capability"]
    if cc != "9.0":
        raise KernelInputError(f"chapter 07's kernels use wgmma, TMA multicast and setmaxnreg, which exist on "
                               f"compute capability 9.0 (Hopper: H100, H200, GH200) only; this GPU is {cc}")


@dataclasses.dataclass(frozen=True)
class Geometry:
    BM: int
    BN: int
    BK: int
    threads: int
    smem: int
    schedule: int       # 0: a block per tile (2D grid); 1: persistent blocks; 2: persistent clusters along M
    operands: int       # 0: pointers; 1: tensor maps of A and B; 2: tensor maps of A, B and C
    stages: int
    cluster: int
    group_m: int

    def grid(self, M: int, N: int, sms: int, cap: int | None = None) -> tuple[int, int, int]:
        tm, tn = -(-M // self.BM), -(-N // self.BN)
        if self.schedule == 0:
            if tm > 65535:
                raise KernelInputError(f"M = {M} needs {tm} rows of blocks: at most 65535 (the grid's y dimension)")
            return (tn, tm, 1)
        blocks = sms if cap is None else min(sms, cap)
        if self.schedule == 1:
            return (max(1, min(tm * tn, blocks)), 1, 1)
        cl = self.cluster
        return (cl * max(1, min(-(-tm // cl) * tn, blocks // cl)), 1, 1)

    def __str__(self):
        sched = ("a block per tile", "persistent", f"persistent clusters of {self.cluster}")[self.schedule]
        return (f"{self.BM}x{self.BN}x{self.BK} tiles, {self.threads} threads, {self.stages} stage(s), {sched}, "
                f"{self.smem:,} B dynamic smem")


@functools.lru_cache(maxsize=None)
def geometry(path: str, macros: tuple = ()) -> Geometry:
    import cupy as cp
    require_hopper()
    out = cp.zeros(16, dtype=cp.int32)
    load_module(path, options(macros)).get_function("launch_config")((1,), (1,), (out,))
    c = [int(x) for x in out.get()]
    return Geometry(*c[:10])


@functools.lru_cache(maxsize=None)
def _kernel(path: str, function: str, macros: tuple):
    return opt_in_shared_memory(kernel(path, function, options(macros)), geometry(path, macros).smem,
                                f"{path} with {dict(macros) or 'its defaults'}")


def check_operands(A, B_t, C) -> tuple[int, int, int]:
    for name, a in (("A", A), ("B_t", B_t)):
        expect(name, a, dtype=np.uint16, ndim=2, align=16)
    M, K = A.shape
    if B_t.shape[1] != K:
        raise KernelInputError(f"B_t has {B_t.shape[1]} columns, A has {K}: C = A @ B_t^T needs them equal "
                               "(B_t is N x K, K-major)")
    N = B_t.shape[0]
    expect("C", C, dtype=np.uint16, shape=(M, N), align=16)
    if K % 8 or N % 8:
        raise KernelInputError(f"K = {K} and N = {N} must be multiples of 8: TMA needs 16-byte rows "
                               "(8 bf16); pad with zeros")
    if min(M, N, K) < 1:
        raise KernelInputError(f"empty product {M} x {N} x {K}")
    return M, N, K


def launcher(A, B_t, C, version: str = BEST, rung: Rung | None = None, grid_cap: int | None = None):
    """A zero-argument function launching C = A @ B_t^T with one rung; the tensor maps are built once here
    (they hold the arrays' addresses: the arrays must stay alive). A, B_t, C: CuPy uint16 arrays."""
    from ..measure.device import sm_count
    if rung is None:
        if version not in rungs():
            raise KernelInputError(f"no chapter 07 version {version!r}: one of {', '.join(rungs())}")
        rung = rungs()[version]
    M, N, K = check_operands(A, B_t, C)
    g = geometry(rung.path, rung.macros)
    k = _kernel(rung.path, rung.function, rung.macros)
    i32 = np.int32
    if g.operands == 0:
        args = (A, B_t, C, i32(M), i32(N), i32(K))
    elif g.operands == 1:
        args = (tensor_map(A, g.BM), tensor_map(B_t, g.BN // g.cluster), C, i32(M), i32(N), i32(K))
    else:
        args = (tensor_map(A, g.BM), tensor_map(B_t, g.BN // g.cluster), tensor_map(C, 64), i32(M), i32(N), i32(K))
    grid, block = g.grid(M, N, sm_count(), grid_cap), (g.threads, 1, 1)
    keep = (A, B_t, C)

    def run():
        k(grid, block, args, shared_mem=g.smem)
    run.grid, run.keep = grid, keep
    return run


def gemm(A, B_t, C, version: str = BEST, rung: Rung | None = None, grid_cap: int | None = None) -> None:
    """C = A @ B_t^T in bf16 with one rung of chapter 07 (Hopper only)."""
    launcher(A, B_t, C, version, rung, grid_cap)()


# --------------------------------------------------------------------------------------------- checks

def check_rung(ctx, rung: Rung, M: int, N: int, K: int, grid_cap: int | None = None, what: str | None = None):
    import cupy as cp
    A, B_t = random_bf16((M, K)), random_bf16((N, K))
    out = GuardedOutput((M, N), "bfloat16")
    gemm(A, B_t, out.array, rung=rung, grid_cap=grid_cap)
    a, b = bf16.from_bits(A).astype(cp.float64), bf16.from_bits(B_t).astype(cp.float64)
    if M * N * K <= 1 << 27:
        a, b = a.get(), b.get()
    rtol, atol = tolerance(K, a, b)
    ctx.verify(what or f"gemm_bf16 {rung.name} {M}x{N}x{K}" + (f" ({grid_cap} blocks)" if grid_cap else ""),
               out, a @ b.T, "bfloat16", rtol=rtol, atol=atol)
    del A, B_t, out, a, b
    cp.get_default_memory_pool().free_all_blocks()


def check_all(ctx, names=None) -> None:
    require_hopper()
    for name, rung in rungs().items():
        if names is not None and name not in names:
            continue
        for M, N, K in CHECK_SHAPES:
            check_rung(ctx, rung, M, N, K)
        if geometry(rung.path, rung.macros).schedule:
            (M, N, K), cap = FEW_BLOCKS
            check_rung(ctx, rung, M, N, K, grid_cap=cap)


def cublas_bf16(A, B_t, C) -> None:
    """C = A @ B_t^T through cuBLAS (torch.matmul on zero-copy bf16 views: the TN GEMM nn.Linear runs)."""
    import torch
    torch.matmul(bf16.as_torch(A), bf16.as_torch(B_t).t(), out=bf16.as_torch(C))


def check_cublas(ctx, M=1000, N=1000, K=1008) -> None:
    A, B_t = random_bf16((M, K)), random_bf16((N, K))
    out = GuardedOutput((M, N), "bfloat16")
    cublas_bf16(A, B_t, out.array)
    a, b = bf16.from_bits(A).get().astype(np.float64), bf16.from_bits(B_t).get().astype(np.float64)
    rtol, atol = tolerance(K, a, b)
    ctx.verify(f"cuBLAS bf16 (TN) {M}x{N}x{K}", out, a @ b.T, "bfloat16", rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------------------------ SASS

def sass(rung: Rung) -> str:
    """The SASS of one rung, compiled by NVRTC for sm_90a (no GPU needed) and disassembled by cuobjdump."""
    from ..measure.compile import sass as compile_sass
    return compile_sass(rung.path, "sm_90a", options(rung.macros))


def sass_counts(text: str) -> dict[str, int]:
    """How often the Hopper instructions appear in a SASS listing."""
    pats = {"HGMMA": r"\bHGMMA\.", "UTMALDG": r"\bUTMALDG\b", "UTMALDG.MULTICAST": r"\bUTMALDG\.\S*MULTICAST",
            "UTMASTG": r"\bUTMASTG\b", "USETMAXREG": r"\bUSETMAXREG\b", "HMMA": r"\bHMMA\."}
    return {k: len(re.findall(p, text)) for k, p in pats.items()}


def check_sass(rung: Rung) -> dict[str, int]:
    counts = sass_counts(sass(rung))
    missing = [i for i in EXPECTED_SASS[rung.name] if not counts[i]]
    if missing:
        raise CheckFailed(f"{rung.name}: the SASS holds no {', '.join(missing)} ({counts})")
    return counts


# ------------------------------------------------------------------------------------------ benchmarks

def flops(M, N, K) -> int:
    return 2 * M * N * K


def compulsory_bytes(M, N, K) -> int:
    return 2 * (M * K + K * N + M * N)


def benchmarks(ctx):
    import cupy as cp

    from .ch06 import have_torch
    from ..measure.device import gpu_info
    if gpu_info()["compute_capability"] != "9.0":
        ctx.log.append("chapter 07 needs a Hopper GPU (compute capability 9.0): nothing recorded")
        return
    torch_ok = have_torch(ctx)
    check_all(ctx)
    if torch_ok:
        check_cublas(ctx)
    for M, N, K in (QUICK_SHAPES if ctx.quick else BENCH_SHAPES):
        A, B_t = random_bf16((M, K)), random_bf16((N, K))
        C = cp.empty((M, N), dtype=cp.uint16)
        # each rung timed in alternation with cuBLAS (the clock drifts under sustained tensor load); the
        # cuBLAS record pools its runs from every pair
        timed, bases = [], []
        reps = 50 if M * N * K <= 1 << 39 else 20
        for name, rung in rungs().items():
            if torch_ok:
                ts = bench_interleaved({"rung": launcher(A, B_t, C, rung=rung),
                                        "cublas": lambda: cublas_bf16(A, B_t, C)}, max_reps=reps)
                timed.append((name, ts["rung"], ts["cublas"]))
                bases.append(ts["cublas"])
            else:
                timed.append((name, bench(launcher(A, B_t, C, rung=rung), max_reps=reps), None))
        if torch_ok:
            yield _record(ctx, "cublas_bf16", (M, N, K), pooled(bases), None)
        for name, t, base in timed:
            yield _record(ctx, name, (M, N, K), t, base)
        if torch_ok:
            ref = C.copy()
            cublas_bf16(A, B_t, ref)
            gemm(A, B_t, C)
            agree(ctx, C, ref, f"{BEST} vs cuBLAS bf16 {M}x{N}x{K} (the timed inputs)")
            del ref
        del A, B_t, C
        cp.get_default_memory_pool().free_all_blocks()


def _record(ctx, kernel_name, shape, t, base):
    M, N, K = shape
    own = kernel_name != "cublas_bf16"
    return ctx.record(chapter="07", op="gemm_bf16", kernel=kernel_name, shape=[M, N, K], dtype="bfloat16",
                      bytes=compulsory_bytes(M, N, K), flops=flops(M, N, K), timing=t,
                      baseline="cuBLAS bf16" if base is not None and own else None,
                      baseline_timing=base if own else None, ceiling="wgmma")


# ----------------------------------------------------------------------------------------- the lab

def stage_bytes(BM: int = 128, BN: int = 256, BK: int = 64) -> int:
    """Shared memory of one ring stage: a BM x BK slice of A and a BN x BK slice of B_t, bf16."""
    return (BM + BN) * BK * 2


def variants(rung_name: str = BEST) -> list[Rung]:
    """The lab's pipeline control: the persistent rung waiting for every wgmma group (IN_FLIGHT=0), then at
    2-4 stages and tile widths 128 and 256."""
    base = rungs()[rung_name]
    out = [Rung(f"{rung_name}[IN_FLIGHT=0]", base.path, base.function, (("IN_FLIGHT", 0),))]
    for bn in (128, 256):
        for stages in (2, 3, 4):
            if 1024 + stages * stage_bytes(BN=bn) + 16 * stages <= 227 * 1024:
                out.append(Rung(f"{rung_name}[BN={bn},STAGES={stages}]", base.path, base.function,
                                (("BN", bn), ("STAGES", stages))))
    return out


def time_variants(vs, shape=(8192, 8192, 8192), progress: bool = True) -> list[dict]:
    """Check each variant on an irregular shape, then time it at `shape` against cuBLAS timed once."""
    import cupy as cp

    from ..measure.context import Context
    from ..measure.progress import tqdm
    M, N, K = shape
    A, B_t = random_bf16((M, K)), random_bf16((N, K))
    C = cp.empty((M, N), dtype=cp.uint16)
    base = bench(lambda: cublas_bf16(A, B_t, C), max_reps=20).median_ms
    scratch = Context({}, {"sm_count": 0})
    rows = []
    for v in tqdm(list(vs), desc="timing variants", disable=not progress):
        try:
            check_rung(scratch, v, 333, 264, 200)
        except (CheckFailed, KernelInputError) as e:
            rows.append({"name": v.name, "error": str(e)[:200]})
            continue
        t = bench(launcher(A, B_t, C, rung=v), max_reps=20).median_ms
        rows.append({"name": v.name, "ms": t, "tflops": flops(M, N, K) / (t * 1e-3) / 1e12, "x_cublas": base / t})
    del A, B_t, C
    cp.get_default_memory_pool().free_all_blocks()
    return rows
