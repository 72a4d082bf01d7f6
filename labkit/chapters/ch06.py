"""Chapter 06: bf16 GEMM on tensor cores with mma.sync, ldmatrix and cp.async, a ladder from WMMA to a
tuned, rasterised kernel, against cuBLAS bf16 (torch.matmul) and the measured mma.sync roof.

Kernels (kernels/06-gemm-tensor-cores/), each `gemm_<name>(const bf16* A, const bf16* B, bf16* C, int M,
int N, int K)` computing C = A @ B for row-major A (M x K), B (K x N) and C (M x N), bf16 in and out, fp32
accumulation; every file also builds `gemm_<name>_anyn` (any N, element-wise B loads and C stores) and
`launch_config(int* out)`, which writes the build's geometry (so the host never repeats the macro
arithmetic). Contract of every rung: K % 8 == 0 (a 16-byte chunk of a row is all in or all out of the
matrix) and 16-byte aligned pointers; any M, N >= 1.
- 01_wmma.cu          WMMA 16x16x16 fragments, tiles staged by plain loads, one buffer;
- 02_mma_ldmatrix.cu  the same with mma.sync m16n8k16 and ldmatrix written out in PTX;
- 03_cp_async.cu      cp.async copies global -> shared (STAGES 1 or 2);
- 04_swizzle.cu       XOR-swizzled shared tiles instead of padded rows;
- 05_multistage.cu    a ring of STAGES slots, one barrier per k-tile;
- 06_warp_tiles.cu    128x256 block tiles of 64x64 warp tiles, fragments reloaded in place;
- 07_rasterized.cu    grouped tile order for L2 reuse and a coalesced epilogue; every knob a macro.
The "tuned" rung is 07 compiled with TUNED, the best -D values of the chapter's sweep on the H200.
The mma.sync roof is chapter 01's probe (the `mma_tflops` ceiling).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..errors import CheckFailed, KernelInputError
from ..measure import bf16
from ..measure.checks import GuardedOutput, expect
from ..measure.compile import kernel, load_module, opt_in_shared_memory
from ..measure.timing import bench, bench_interleaved, pooled

WMMA = "06-gemm-tensor-cores/01_wmma.cu"
MMA_LDMATRIX = "06-gemm-tensor-cores/02_mma_ldmatrix.cu"
CP_ASYNC = "06-gemm-tensor-cores/03_cp_async.cu"
SWIZZLE = "06-gemm-tensor-cores/04_swizzle.cu"
MULTISTAGE = "06-gemm-tensor-cores/05_multistage.cu"
WARP_TILES = "06-gemm-tensor-cores/06_warp_tiles.cu"
RASTERIZED = "06-gemm-tensor-cores/07_rasterized.cu"

# The fastest correct configuration of 07_rasterized.cu in the chapter's sweep on the H200 (34
# configurations at 8192^3, labs/results/logs/2026-12-01/gemm-mma-ladder-sweep.log): 256 x 128 x 32 block
# tiles, 64 x 64 warp tiles, a 5-stage ring, swizzled, tile rows grouped by 8. The lab re-measures it
# beside its neighbours.
TUNED = {"BM": 256, "BN": 128, "BK": 32, "WM": 64, "WN": 64, "STAGES": 5, "SWIZZLE": 1, "GROUP_M": 8}
KNOBS = tuple(TUNED)          # the macros of 07_rasterized.cu a configuration sets

HEADLINE = {"gemm_bf16": "8192x8192x8192"}      # the shape the book's plain figures refer to
BENCH_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
QUICK_SHAPES = ((2048, 2048, 2048), (4096, 4096, 4096))
# public shapes: the smallest (one mma tile), tails in M, N and K, N % 8 != 0 (the _anyn entry points), a
# K-heavy and a tall-skinny product, and one not far from square
CHECK_SHAPES = [(1, 8, 8), (16, 8, 16), (128, 128, 64), (129, 255, 64), (100, 1001, 200), (257, 384, 4104),
                (4096, 64, 512), (64, 72, 8192), (1000, 1000, 1008)]
EPS32 = float(np.finfo(np.float32).eps)
BF16_RTOL = 2.0 ** -8            # twice bf16's half-ulp: the rounding of the output itself


@dataclasses.dataclass(frozen=True)
class Rung:
    name: str           # the record's kernel name
    path: str           # the kernel file under kernels/
    function: str       # its entry point (N % 8 == 0); `function + "_anyn"` takes any N
    macros: tuple = ()  # -D overrides as (name, value) pairs


RUNGS = (Rung("wmma", WMMA, "gemm_wmma"), Rung("mma_ldmatrix", MMA_LDMATRIX, "gemm_mma_ldmatrix"),
         Rung("cp_async_1stage", CP_ASYNC, "gemm_cp_async", (("STAGES", 1),)),
         Rung("cp_async", CP_ASYNC, "gemm_cp_async"), Rung("swizzle", SWIZZLE, "gemm_swizzle"),
         Rung("multistage", MULTISTAGE, "gemm_multistage"), Rung("warp_tiles", WARP_TILES, "gemm_warp_tiles"),
         Rung("rasterized", RASTERIZED, "gemm_rasterized"))


def rungs() -> dict[str, Rung]:
    """The ladder by name, the tuned configuration last."""
    out = {r.name: r for r in RUNGS}
    out["tuned"] = Rung("tuned", RASTERIZED, "gemm_rasterized", tuple(sorted(TUNED.items())))
    return out


def options(macros) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in sorted(dict(macros).items()))


@dataclasses.dataclass(frozen=True)
class Geometry:
    BM: int
    BN: int
    threads: int
    smem: int           # dynamic shared memory bytes
    grid_1d: bool       # a 1D grid of tiles (the rasterised rungs) or (ceil(N/BN), ceil(M/BM))
    BK: int
    WM: int
    WN: int
    stages: int
    swizzle: int
    group_m: int

    def grid(self, M: int, N: int) -> tuple[int, int, int]:
        tm, tn = -(-M // self.BM), -(-N // self.BN)
        if self.grid_1d:
            return (tm * tn, 1, 1)
        if tm > 65535:
            raise KernelInputError(f"M = {M} needs {tm} rows of blocks: at most 65535 (the grid's y dimension)")
        return (tn, tm, 1)

    def __str__(self):
        s = (f"{self.BM}x{self.BN}x{self.BK} tiles, {self.WM}x{self.WN} warps, {self.threads} threads, "
             f"{self.stages} stage{'s' if self.stages > 1 else ''}, {'swizzled' if self.swizzle else 'padded'}")
        return s + (f", GROUP_M {self.group_m}" if self.grid_1d else "") + f", {self.smem:,} B dynamic smem"


@functools.lru_cache(maxsize=None)
def geometry(path: str, macros: tuple = ()) -> Geometry:
    """The launch geometry of one build, as its own `launch_config` kernel reports it (on the GPU)."""
    import cupy as cp
    out = cp.zeros(16, dtype=cp.int32)
    load_module(path, options(macros)).get_function("launch_config")((1,), (1,), (out,))
    c = [int(x) for x in out.get()]
    return Geometry(BM=c[0], BN=c[1], threads=c[2], smem=c[3], grid_1d=bool(c[4]), BK=c[5], WM=c[6], WN=c[7],
                    stages=c[8], swizzle=c[9], group_m=c[10])


@functools.lru_cache(maxsize=None)
def _kernel(path: str, function: str, macros: tuple):
    require_tensor_cores()
    return opt_in_shared_memory(kernel(path, function, options(macros)), geometry(path, macros).smem,
                                f"{path} with {dict(macros) or 'its defaults'}")


def require_tensor_cores() -> None:
    """mma.sync with bf16 operands, ldmatrix and cp.async exist from compute capability 8.0 (A100) on."""
    from ..measure.device import gpu_info, require_gpu
    require_gpu("chapter 06's kernels")
    cc = gpu_info()["compute_capability"]
    if float(cc) < 8.0:
        raise KernelInputError(f"chapter 06's kernels use bf16 mma.sync, ldmatrix and cp.async, which need compute "
                               f"capability 8.0 or later (A100, L4, H100, H200); this GPU is {cc} (a T4 is 7.5)")


@functools.lru_cache(maxsize=1)
def fits_this_gpu(rung: Rung) -> bool:
    from ..measure import compile as nvrtc      # looked up at call time: tests stand in a smaller GPU
    return geometry(rung.path, rung.macros).smem <= nvrtc.max_dynamic_smem()


def _rung(version: str, rung: Rung | None) -> Rung:
    if rung is not None:
        return rung
    table = rungs()
    if version not in table:
        raise KernelInputError(f"no gemm version {version!r}: one of {', '.join(table)}")
    return table[version]


def check_operands(A, B, C) -> tuple[int, int, int]:
    """(M, N, K) of C = A @ B, or KernelInputError naming what breaks the contract."""
    for name, a in (("A", A), ("B", B)):
        expect(name, a, dtype=np.uint16, ndim=2, align=16)
    M, K = A.shape
    if B.shape[0] != K:
        raise KernelInputError(f"B has {B.shape[0]} rows, A has {K} columns: A @ B needs them equal")
    N = B.shape[1]
    expect("C", C, dtype=np.uint16, shape=(M, N), align=16)
    if K % 8:
        raise KernelInputError(f"K = {K} is not a multiple of 8: the kernels copy rows in 16-byte chunks "
                               "(8 bf16); pad K with zeros to a multiple of 8")
    if max(M, N, K) >= 2 ** 31:
        raise KernelInputError(f"each of M, N, K must be below 2^31 (int arguments), got {M}, {N}, {K}")
    return M, N, K


def launcher(A, B, C, version: str = "tuned", rung: Rung | None = None):
    """A zero-argument function launching C = A @ B with one rung (arguments checked and packed once, so a
    timing loop pays only CuPy's launch call). A, B, C: CuPy uint16 arrays of bf16 bit patterns."""
    rung = _rung(version, rung)
    M, N, K = check_operands(A, B, C)
    if M == 0 or N == 0:
        return lambda: None
    if K == 0:
        return lambda: C.fill(0)
    g = geometry(rung.path, rung.macros)
    k = _kernel(rung.path, rung.function if N % 8 == 0 else rung.function + "_anyn", rung.macros)
    grid, block = g.grid(M, N), (g.threads, 1, 1)
    args = (A, B, C, np.int32(M), np.int32(N), np.int32(K))
    return lambda: k(grid, block, args, shared_mem=g.smem)


def gemm(A, B, C, version: str = "tuned", rung: Rung | None = None) -> None:
    """C = A @ B in bf16 (fp32 accumulation) with one rung of the ladder (`version`, or an explicit `rung`
    with its macros). Contract: K % 8 == 0, 16-byte aligned, C-contiguous bf16 (uint16) arrays."""
    launcher(A, B, C, version, rung)()


# ----------------------------------------------------------------------------------- fragment layouts

def fragment_a(lane: int) -> list[tuple[int, int]]:
    """(row, col) of the A (16 x 16, row-major) element each of the lane's 8 bf16 values holds in
    mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"): registers a0..a3, two each."""
    g, t = lane >> 2, lane & 3
    return [(g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)) for i in range(8)]


def fragment_b(lane: int) -> list[tuple[int, int]]:
    """(k, n) of the B (16 x 8) element each of the lane's 4 bf16 values holds (registers b0, b1)."""
    g, t = lane >> 2, lane & 3
    return [(2 * t + (i & 1) + 8 * (i >> 1), g) for i in range(4)]


def fragment_c(lane: int) -> list[tuple[int, int]]:
    """(row, col) of the C/D (16 x 8, fp32) element each of the lane's 4 accumulators holds."""
    g, t = lane >> 2, lane & 3
    return [(g + 8 * (i >> 1), 2 * t + (i & 1)) for i in range(4)]


FRAGMENTS = {"A": (fragment_a, (16, 16)), "B": (fragment_b, (16, 8)), "C": (fragment_c, (16, 8))}


def owners(which: str) -> np.ndarray:
    """For operand `which` ('A', 'B' or 'C'): an int array of its shape, each element's (lane, index)
    coded as lane * 8 + index, from the fragment functions."""
    f, shape = FRAGMENTS[which]
    own = np.full(shape, -1, dtype=np.int64)
    for lane in range(32):
        for i, (r, c) in enumerate(f(lane)):
            own[r, c] = lane * 8 + i
    return own


FRAGMENTS_PROBE = "06-gemm-tensor-cores/00_fragments.cu"


def index_tables(a=fragment_a, b=fragment_b, c=fragment_c):
    """The flat row-major indices each lane loads (A: 8 per lane, B: 4) and stores (C: 4), from fragment
    functions (the chapter's by default), as int32 arrays for 00_fragments.cu."""
    tables = []
    for f, (rows, cols) in ((a, (16, 16)), (b, (16, 8)), (c, (16, 8))):
        tables.append(np.array([r * cols + col for lane in range(32) for r, col in f(lane)], dtype=np.int32))
    return tables


def fragment_product(A, B, tables=None):
    """C (16 x 8, fp32) from one mma.sync whose operands are gathered and scattered by `tables` (by default
    the chapter's fragment functions): A (16 x 16) and B (16 x 8) CuPy uint16 arrays of bf16 bits."""
    import cupy as cp
    require_tensor_cores()
    expect("A", A, dtype=np.uint16, shape=(16, 16))
    expect("B", B, dtype=np.uint16, shape=(16, 8))
    ta, tb, tc = (cp.asarray(t) for t in (tables or index_tables()))
    C = cp.full((16, 8), cp.nan, dtype=cp.float32)
    kernel(FRAGMENTS_PROBE, "mma_fragments")((1,), (32,), (A, B, C, ta, tb, tc))
    return C


def check_fragments(ctx) -> None:
    """The fragment functions are the hardware's layout: one mma.sync with operands placed by them gives
    A @ B (K = 16: exact up to fp32 rounding of 16 products)."""
    A, B = random_bf16((16, 16)), random_bf16((16, 8))
    C = fragment_product(A, B)
    ref = bf16.from_bits(A).get().astype(np.float64) @ bf16.from_bits(B).get().astype(np.float64)
    got = C.get().astype(np.float64)
    bad = ~(np.abs(got - ref) <= 1e-5 * (1 + np.abs(ref)))
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise CheckFailed(f"mma.sync fragment layout: C[{r}, {c}] = {got[r, c]:.6g}, expected {ref[r, c]:.6g} "
                          f"({int(bad.sum())} of 128 wrong)")
    ctx.log.append("ok  mma.sync m16n8k16 fragment layouts (A, B, C) on the tensor cores")


# --------------------------------------------------------------------------------------------- checks

def random_bf16(shape):
    """Fresh random normal values as bf16 bit patterns (a CuPy uint16 array)."""
    import cupy as cp
    return bf16.to_bits(cp.random.standard_normal(shape, dtype=cp.float32))


def rms(x) -> float:
    import cupy as cp
    xp = cp.get_array_module(x)
    return float(xp.sqrt(xp.mean(xp.square(x.astype(xp.float64))))) if x.size else 0.0


def tolerance(K: int, a, b) -> tuple[float, float]:
    """(rtol, atol) of a bf16-output GEMM against float64 from the exact bf16 inputs `a`, `b` (float arrays):
    the output's rounding, 2^-8 |ref| (twice bf16's half-ulp), plus fp32 accumulation over K terms,
    8 K eps32 rms(a) rms(b) (the ~sqrt(K) eps32 of random rounding errors times a |partial sum| of
    ~sqrt(K) rms(a) rms(b), with a margin of 8). A missing k-step, or bf16 rounding inside the loop, is far
    outside it."""
    return BF16_RTOL, 8 * max(K, 1) * EPS32 * rms(a) * rms(b) + 1e-30


def reference(a64, b64):
    """float64 A @ B: on the host for small products, on the GPU (CuPy) for large ones."""
    return a64 @ b64


def check_rung(ctx, rung: Rung, M: int, N: int, K: int, what: str | None = None) -> None:
    """Run `rung` on fresh random A, B into a poisoned, canary-padded C and compare with float64."""
    import cupy as cp
    A, B = random_bf16((M, K)), random_bf16((K, N))
    out = GuardedOutput((M, N), "bfloat16")
    gemm(A, B, out.array, rung=rung)
    on_gpu = M * N * K > 1 << 27
    a, b = bf16.from_bits(A).astype(cp.float64), bf16.from_bits(B).astype(cp.float64)
    if not on_gpu:
        a, b = a.get(), b.get()
    rtol, atol = tolerance(K, a, b)
    ctx.verify(what or f"gemm_bf16 {rung.name} {M}x{N}x{K}", out, reference(a, b), "bfloat16", rtol=rtol,
               atol=atol)
    del A, B, out, a, b
    cp.get_default_memory_pool().free_all_blocks()


def check_contract(rung: Rung) -> None:
    """The wrapper refuses what breaks the contract with a message naming it."""
    import cupy as cp
    A, B, C = random_bf16((32, 12)), random_bf16((12, 16)), cp.empty((32, 16), dtype=cp.uint16)
    try:
        gemm(A, B, C, rung=rung)
    except KernelInputError as e:
        if "multiple of 8" not in str(e):
            raise CheckFailed(f"{rung.name}: K = 12 refused, but the message does not name the rule: {e}")
    else:
        raise CheckFailed(f"{rung.name}: K = 12 (not a multiple of 8) was launched, not refused")


def check_all(ctx, names=None) -> None:
    require_tensor_cores()
    check_fragments(ctx)
    for name, rung in rungs().items():
        if names is not None and name not in names:
            continue
        if not fits_this_gpu(rung):
            ctx.log.append(f"--  {name}: needs more shared memory per block than this GPU has: not checked")
            continue
        for M, N, K in CHECK_SHAPES:
            check_rung(ctx, rung, M, N, K)
        check_contract(rung)


# ------------------------------------------------------------------------------------------ cuBLAS

def cublas_bf16(A, B, C) -> None:
    """C = A @ B through cuBLAS in bf16 (torch.matmul on zero-copy views; fp32 accumulation)."""
    import torch
    torch.matmul(bf16.as_torch(A), bf16.as_torch(B), out=bf16.as_torch(C))


def check_cublas(ctx, M=1000, N=1000, K=1008) -> None:
    """The baseline is held to the same tolerance as the rungs."""
    import cupy as cp
    A, B = random_bf16((M, K)), random_bf16((K, N))
    out = GuardedOutput((M, N), "bfloat16")
    cublas_bf16(A, B, out.array)
    a, b = bf16.from_bits(A).get().astype(np.float64), bf16.from_bits(B).get().astype(np.float64)
    rtol, atol = tolerance(K, a, b)
    ctx.verify(f"cuBLAS bf16 {M}x{N}x{K}", out, a @ b, "bfloat16", rtol=rtol, atol=atol)
    del A, B, out
    cp.get_default_memory_pool().free_all_blocks()


# ------------------------------------------------------------------------------------------ benchmarks

def flops(M, N, K) -> int:
    return 2 * M * N * K


def compulsory_bytes(M, N, K) -> int:
    """Each matrix moved once: A and B read, C written (bf16)."""
    return 2 * (M * K + K * N + M * N)


def have_torch(ctx) -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        ctx.log.append("torch not installed: gemm_bf16 recorded without the cuBLAS baseline")
        return False


def benchmarks(ctx):
    import cupy as cp
    torch_ok = have_torch(ctx)
    check_all(ctx)
    if torch_ok:
        check_cublas(ctx)
    for M, N, K in (QUICK_SHAPES if ctx.quick else BENCH_SHAPES):
        A, B = random_bf16((M, K)), random_bf16((K, N))
        C = cp.empty((M, N), dtype=cp.uint16)
        # each rung timed in alternation with cuBLAS (bench_interleaved: the clock drifts under sustained
        # tensor load); the cuBLAS record pools its runs from every pair
        timed, bases = [], []
        for name, rung in rungs().items():
            if not fits_this_gpu(rung):
                ctx.log.append(f"{name}: needs more shared memory per block than this GPU has: not timed")
                continue
            if torch_ok:
                ts = bench_interleaved({"rung": launcher(A, B, C, rung=rung), "cublas": lambda: cublas_bf16(A, B, C)})
                timed.append((name, ts["rung"], ts["cublas"]))
                bases.append(ts["cublas"])
            else:
                timed.append((name, bench(launcher(A, B, C, rung=rung), max_reps=50), None))
        if torch_ok:
            yield _record(ctx, "cublas_bf16", (M, N, K), pooled(bases), None)
        for name, t, base in timed:
            yield _record(ctx, name, (M, N, K), t, base)
        if torch_ok:             # the timed output of the best rung against cuBLAS's on the same inputs
            ref = C.copy()
            cublas_bf16(A, B, ref)
            gemm(A, B, C)
            agree(ctx, C, ref, f"tuned vs cuBLAS bf16 {M}x{N}x{K} (the timed inputs)")
            del ref
        del A, B, C
        cp.get_default_memory_pool().free_all_blocks()


def agree(ctx, got, ref, what):
    """Two bf16 results of the same product: within a few bf16 ulps of each other (both are rounded)."""
    from ..measure.checks import compare
    m = compare(bf16.from_bits(got).astype("float64"), bf16.from_bits(ref).astype("float64"), "bfloat16",
                rtol=2 * BF16_RTOL, atol=2 * BF16_RTOL * rms(bf16.from_bits(ref)), shape=got.shape)
    if m is not None:
        raise CheckFailed(f"{what}: {m}")
    ctx.log.append(f"ok  {what}")


def _record(ctx, kernel_name, shape, t, base):
    M, N, K = shape
    own = kernel_name != "cublas_bf16"
    return ctx.record(chapter="06", op="gemm_bf16", kernel=kernel_name, shape=[M, N, K], dtype="bfloat16",
                      bytes=compulsory_bytes(M, N, K), flops=flops(M, N, K), timing=t,
                      baseline="cuBLAS bf16" if base is not None and own else None,
                      baseline_timing=base if own else None, ceiling="mma")


# ----------------------------------------------------------------------------------------- the lab

def smem_bytes(c: dict) -> int:
    """Dynamic shared memory of a 07_rasterized.cu configuration: the ring, or the epilogue's staged C
    tile (rows padded by 8 elements) if that is larger."""
    return max(c["STAGES"] * (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2, c["BM"] * (c["BN"] + 8) * 2)


def fits(c: dict) -> bool:
    """Whether a configuration of 07_rasterized.cu can build and launch: warp tiles that divide the block
    tile into 4-8 warps of whole m16 x n16 fragments, at most 227 KB of shared memory per block, and the
    accumulators (WM WN / 32 fp32 per thread) under ~160 registers of the 255."""
    BM, BN, BK, WM, WN, S = (c[k] for k in ("BM", "BN", "BK", "WM", "WN", "STAGES"))
    if BM % WM or BN % WN or WM % 16 or WN % 16 or BK % 16 or BK < 32 or BN < 64 or not 2 <= S <= 8:
        return False
    warps = (BM // WM) * (BN // WN)
    return 4 <= warps <= 8 and WM * WN // 32 <= 160 and smem_bytes(c) <= 227 * 1024


def tuning_configs(limit: int | None = None) -> list[dict]:
    """Configurations of 07_rasterized.cu for the lab's sweep: the tuned one, the file's defaults, then
    their neighbours (block tile, warp tile, ring depth, slab depth, group size), each checked by `fits`."""
    out, seen = [], set()

    def add(**kw):
        c = {**TUNED, **kw}
        key = tuple(sorted(c.items()))
        if key not in seen and fits(c):
            seen.add(key)
            out.append(c)

    add()
    add(BM=128, BN=256, STAGES=4)                            # the file's defaults
    for s in (3, 4, 6):
        add(STAGES=s)
    for g in (1, 4, 16):
        add(GROUP_M=g)
    add(SWIZZLE=0)
    add(BK=64, STAGES=3)
    for BM, BN in ((128, 256), (128, 128)):
        for S in (3, 4, 5):
            add(BM=BM, BN=BN, STAGES=S)
    add(WM=128, WN=32)
    add(BM=128, BN=256, WM=32, WN=128, STAGES=4)
    return out[:limit] if limit else out


def tune(configs, shape=(4096, 4096, 4096), progress: bool = True) -> list[dict]:
    """Compile, check and time each configuration of 07_rasterized.cu at `shape` against cuBLAS timed once
    before the search. Each is first checked on (129, 255, 64) and (256, 384, 1000) against float64. Returns
    one dict per configuration: its macros, ms, TFLOP/s and fraction of cuBLAS, or the reason it failed."""
    import cupy as cp

    from ..measure.context import Context
    from ..measure.progress import tqdm
    M, N, K = shape
    A, B = random_bf16((M, K)), random_bf16((K, N))
    C = cp.empty((M, N), dtype=cp.uint16)
    scratch = Context({}, {"sm_count": 0})
    base = bench(lambda: cublas_bf16(A, B, C), max_reps=20, target_ms=150).median_ms
    rows = []
    for c in tqdm(list(configs), desc="tuning 07_rasterized", disable=not progress):
        rung = Rung("candidate", RASTERIZED, "gemm_rasterized", tuple(sorted(c.items())))
        try:
            for s in ((129, 255, 64), (256, 384, 1000)):
                check_rung(scratch, rung, *s)
        except CheckFailed as e:
            rows.append({**c, "error": str(e)[:200]})
            continue
        except Exception as e:          # a configuration the compiler or the driver refuses: noted, not fatal
            rows.append({**c, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            continue
        t = bench(launcher(A, B, C, rung=rung), max_reps=20, target_ms=150)
        rows.append({**c, "ms": t.median_ms, "tflops": flops(M, N, K) / (t.median_ms * 1e-3) / 1e12,
                     "x_cublas": base / t.median_ms})
    del A, B, C
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def block_intensity(BM: int, BN: int) -> float:
    """FLOP per byte of global (L2) traffic of one BM x BN tile of C in bf16: 2 BM BN BK FLOPs per slab for
    2 (BM + BN) BK bytes, i.e. BM BN / (BM + BN)."""
    return BM * BN / (BM + BN)


def warp_smem_bytes_per_flop(WM: int, WN: int) -> float:
    """Shared-memory bytes ldmatrix reads per FLOP for a WM x WN warp tile: (WM + WN) x 16 x 2 bytes per
    k16-step for 2 WM WN 16 FLOPs."""
    return (WM + WN) * 32 / (2 * WM * WN * 16)
