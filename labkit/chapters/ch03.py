"""Chapter 03: memory coalescing and elementwise kernels, against torch and the copy ceiling.

Kernels (kernels/03-elementwise/):
- 01_add_strided.cu              `add_bf16_strided`             lanes `stride` elements apart (kernel "strided"; the
                                                                stride sweep records op "add_bf16_stride", kernels
                                                                "stride_0001" ... "stride_2048");
- 02_add_vec128.cu               `add_bf16_vec128`              one 16-byte vector per thread ("vec128");
- 03_add_vec128_gridstride.cu    `add_bf16_vec{128,64,32}_gridstride`  unrolled grid-stride loop over 16-, 8- or
                                                                4-byte vectors ("vec128_gridstride" is the 16-byte one);
- 04_bias_gelu_unfused.cu        `bias_add_bf16` then `gelu_bf16`  two passes with a bf16 temporary ("unfused");
- 05_bias_gelu_fused.cu          `bias_gelu_fused`              one pass, a grid-stride loop ("fused");
- 06_triton_bias_gelu.py         `bias_gelu_triton`             the same op in Triton ("triton"), beside
                                                                torch.compile of the eager expression ("torch_compile");
- 07_bias_gelu_fused_2d.cu       `bias_gelu_fused_2d[_scalar]`  one pass on a 2-D grid, bare ex2/rcp ("fused_2d").
The naive add is chapter 02's kernel (one copy of it: `labkit.chapters.ch02.add_naive`).

bf16 arrays are CuPy uint16 arrays of bit patterns (labkit.bf16). The vector wrappers return the path they
took ("vec128" / "vec64" / "vec32", or "scalar" when a pointer is not aligned for the vector width).
Lab tool: `sweep_vec` (vector width x blocks per SM of the grid-stride add).
"""
from __future__ import annotations

import numpy as np

from ..measure import bf16
from ..errors import CheckFailed
from ..measure.checks import GuardedOutput, expect, expect_threads
from ..measure.compile import kernel, python_kernels
from ..measure.device import sm_count
from ..errors import KernelInputError
from ..measure.timing import bench
from .ch02 import (SENTINEL, SENTINEL_VALUE, _expect_add, add_naive, checked_sweep, gpu_add_reference, random_bf16,
                   torch_bf16, verify_add, verify_add_huge)

HEADLINE = {"add_bf16": "268435456", "bias_gelu": "16384x8192"}   # the shape the book's plain figures of each op refer to

ADD_STRIDED = "03-elementwise/01_add_strided.cu"
ADD_VEC128 = "03-elementwise/02_add_vec128.cu"
ADD_VEC_GRIDSTRIDE = "03-elementwise/03_add_vec128_gridstride.cu"
BIAS_GELU_UNFUSED = "03-elementwise/04_bias_gelu_unfused.cu"
BIAS_GELU_FUSED = "03-elementwise/05_bias_gelu_fused.cu"
TRITON_BIAS_GELU = "03-elementwise/06_triton_bias_gelu.py"
BIAS_GELU_FUSED_2D = "03-elementwise/07_bias_gelu_fused_2d.cu"
FUSED_2D_ROWS = 2          # ROWS_PER_THREAD of 07_bias_gelu_fused_2d.cu (its default)
GRID_Y_MAX = 65535

GRIDSTRIDE_KERNELS = {8: "add_bf16_vec128_gridstride", 4: "add_bf16_vec64_gridstride", 2: "add_bf16_vec32_gridstride"}
MAX_THREADS = 256          # the grid-stride and bias-GELU kernels are compiled with __launch_bounds__(256)
STRIDE_MAX = 65535         # add_strided: one block row per column, and gridDim.y is at most 65535
STRIDE_SWEEP = (1, 16, 32, 64, 128, 256, 512, 1024, 2048)   # the recorded stride sweep (op "add_bf16_stride")
STRIDE_SWEEP_N = 2 ** 26                                    # ... at the lab's size
CHECK_SIZES = [0, 1, 7, 8, 9, 15, 16, 17, 4095, 1_000_003]   # around the vector width, odd, prime
GELU_SHAPES = [(1, 1), (3, 5), (7, 8), (33, 24), (129, 1000), (257, 4104)]
GELU_FLOPS_PER_ELEMENT = 9   # 1 for the bias add + ~8 for tanh-GELU (u^2, fma, mul, exp, add, div, ...)
# bias-GELU tolerance: the output is bf16, so up to half an ulp (2^-9 relative) of rounding, a full ulp
# near a rounding boundary (2^-8 < 8e-3); the fp32 arithmetic adds ~1e-5. Tiny results are compared absolutely.
GELU_RTOL, GELU_ATOL = 8e-3, 1e-9


def _grid(work: int, threads: int, blocks_per_sm: int, blocks: int | None) -> int:
    """Blocks for a grid-stride kernel: SMs x blocks_per_sm, no more than the work needs, at least one."""
    if blocks is not None:
        if blocks < 1:
            raise KernelInputError(f"blocks must be at least 1, got {blocks}")
        return int(blocks)
    if blocks_per_sm < 1:
        raise KernelInputError(f"blocks_per_sm must be at least 1, got {blocks_per_sm}")
    return int(max(1, min(sm_count() * blocks_per_sm, -(-work // threads))))


def _aligned(nbytes: int, *arrays) -> bool:
    return all(a.data.ptr % nbytes == 0 for a in arrays)


# ------------------------------------------------------------------------------------------ the add ladder

def strided_grid(n: int, stride: int, threads: int = 256) -> tuple[int, int]:
    """The 2-D grid of `add_bf16_strided`: (blocks covering the ceil(n / stride) rows, one block row per
    column of the stride-wide view)."""
    rows = -(-int(n) // int(stride))
    return max(1, -(-rows // int(threads))), int(stride)


def add_strided(x, b, y, stride: int = 32, threads: int = 256):
    """y = x + b with neighbouring lanes `stride` elements apart (every element still done exactly once):
    the n elements viewed as ceil(n / stride) rows of `stride`, a thread per (row, column), the grid's
    y index the column. stride 1 is chapter 02's naive kernel; at most STRIDE_MAX (gridDim.y)."""
    _expect_add(x, b, y)
    expect_threads(threads, 1024)
    if not isinstance(stride, (int, np.integer)) or not 1 <= stride <= STRIDE_MAX:
        raise KernelInputError(f"stride must be an integer from 1 to {STRIDE_MAX} (the grid's y dimension), "
                               f"got {stride!r}")
    n = x.size
    if n:
        kernel(ADD_STRIDED, "add_bf16_strided")(strided_grid(n, stride, threads), (int(threads),),
                                                (x, b, y, np.int64(n), np.int64(stride)))


def add_vec128(x, b, y, threads: int = 256) -> str:
    """y = x + b with one 16-byte vector (8 bf16) per thread and a scalar tail.

    x, b and y must start on 16-byte boundaries for the vector kernel; otherwise (a view such as x[1:])
    chapter 02's scalar kernel runs instead. Returns the path taken: "vec128" or "scalar".
    """
    _expect_add(x, b, y)
    expect_threads(threads, 1024)
    if not _aligned(16, x, b, y):
        add_naive(x, b, y, threads)
        return "scalar"
    n = x.size
    if n:
        blocks = max(1, -(-(n // 8) // threads))                 # at least one block, for the tail
        kernel(ADD_VEC128, "add_bf16_vec128")((blocks,), (int(threads),), (x, b, y, np.int64(n)))
    return "vec128"


def add_vec128_gridstride(x, b, y, vec_width: int = 8, blocks_per_sm: int = 8, threads: int = 256,
                          blocks: int | None = None) -> str:
    """y = x + b with an unrolled grid-stride loop over vectors of `vec_width` bf16 (2, 4 or 8).

    The grid is SMs x `blocks_per_sm` blocks of `threads` (at most 256), capped by the work; `blocks`
    overrides it (tests use tiny grids to make every thread loop). x, b and y must be aligned to
    2 x vec_width bytes; otherwise chapter 02's scalar kernel runs. Returns the path: "vec128", "vec64",
    "vec32" or "scalar".
    """
    _expect_add(x, b, y)
    expect_threads(threads, MAX_THREADS)
    if vec_width not in GRIDSTRIDE_KERNELS:
        raise KernelInputError(f"vec_width must be one of {sorted(GRIDSTRIDE_KERNELS)} (bf16 per access), "
                               f"got {vec_width!r}")
    if not _aligned(2 * vec_width, x, b, y):
        add_naive(x, b, y)
        return "scalar"
    n = x.size
    if n:
        grid = _grid(max(1, n // vec_width), threads, blocks_per_sm, blocks)
        kernel(ADD_VEC_GRIDSTRIDE, GRIDSTRIDE_KERNELS[vec_width])((grid,), (int(threads),), (x, b, y, np.int64(n)))
    return f"vec{16 * vec_width}"


ADD_KERNELS = {"naive": add_naive, "strided": add_strided, "vec128": add_vec128,
               "vec128_gridstride": add_vec128_gridstride}


# ------------------------------------------------------------------------------------------ bias + GELU

def _expect_bias(x, b, y):
    expect("x", x, dtype=np.uint16, ndim=2, align=2)
    M, N = x.shape
    expect("b", b, dtype=np.uint16, shape=(N,), align=2)
    expect("y", y, dtype=np.uint16, shape=(M, N), align=2)
    return M, N


def _bias_path(N: int, *arrays) -> str:
    """The path the bias kernels take (they decide the same way on the GPU)."""
    return "vec128" if N % 8 == 0 and _aligned(16, *arrays) else "scalar"


def bias_add(x, b, t, blocks_per_sm: int = 8, threads: int = 256, blocks: int | None = None) -> str:
    """t = bf16(x + b[col]) for x, t [M, N] and b [N] (the unfused version's first kernel)."""
    M, N = _expect_bias(x, b, t)
    expect_threads(threads, MAX_THREADS)
    path = _bias_path(N, x, b, t)
    if M * N:
        work = M * N // 8 if path == "vec128" else M * N
        grid = _grid(work, threads, blocks_per_sm, blocks)
        kernel(BIAS_GELU_UNFUSED, "bias_add_bf16")((grid,), (int(threads),), (x, b, t, np.int64(M), np.int64(N)))
    return path


def gelu(t, y, blocks_per_sm: int = 8, threads: int = 256, blocks: int | None = None) -> str:
    """y = bf16(gelu_tanh(t)) elementwise, any shape (the unfused version's second kernel)."""
    expect("t", t, dtype=np.uint16, align=2)
    expect("y", y, dtype=np.uint16, shape=t.shape, align=2)
    expect_threads(threads, MAX_THREADS)
    path = "vec128" if _aligned(16, t, y) else "scalar"
    n = t.size
    if n:
        work = max(1, n // 8) if path == "vec128" else n
        grid = _grid(work, threads, blocks_per_sm, blocks)
        kernel(BIAS_GELU_UNFUSED, "gelu_bf16")((grid,), (int(threads),), (t, y, np.int64(n)))
    return path


def bias_gelu_unfused(x, b, y, tmp=None, blocks_per_sm: int = 8, threads: int = 256,
                      blocks: int | None = None) -> str:
    """y = gelu_tanh(x + b[col]) in two passes through a bf16 temporary `tmp` (allocated if None).
    Returns "vec128" if both kernels ran vectorised, "scalar" if neither did, else "mixed"."""
    import cupy as cp
    M, N = _expect_bias(x, b, y)
    if tmp is None:
        tmp = cp.empty((M, N), dtype=cp.uint16)
    p1 = bias_add(x, b, tmp, blocks_per_sm, threads, blocks)
    p2 = gelu(tmp, y, blocks_per_sm, threads, blocks)
    return p1 if p1 == p2 else "mixed"


def bias_gelu_fused(x, b, y, blocks_per_sm: int = 8, threads: int = 256, blocks: int | None = None) -> str:
    """y = gelu_tanh(x + b[col]) in one pass, fp32 inside; 16-byte vectors when N % 8 == 0 and x, b, y are
    16-byte aligned, single elements otherwise. Returns the path: "vec128" or "scalar"."""
    M, N = _expect_bias(x, b, y)
    expect_threads(threads, MAX_THREADS)
    path = _bias_path(N, x, b, y)
    if M * N:
        work = M * N // 8 if path == "vec128" else M * N
        grid = _grid(work, threads, blocks_per_sm, blocks)
        kernel(BIAS_GELU_FUSED, "bias_gelu_fused")((grid,), (int(threads),), (x, b, y, np.int64(M), np.int64(N)))
    return path


def bias_gelu_fused_2d(x, b, y, threads: int = 256, blocks: int | None = None) -> str:
    """y = gelu_tanh(x + b[col]) in one pass on a 2-D grid: a thread per column vector (8 bf16, or one
    element on the scalar path) and group of ROWS_PER_THREAD rows, its biases loaded once, GELU with bare
    ex2/rcp instructions. 16-byte vectors when N % 8 == 0 and x, b, y are 16-byte aligned. `blocks`
    overrides the grid's row dimension (tests use a small one so that every thread loops over rows).
    Returns the path: "vec128" or "scalar"."""
    M, N = _expect_bias(x, b, y)
    expect_threads(threads, MAX_THREADS)
    path = _bias_path(N, x, b, y)
    if M * N:
        w = 8 if path == "vec128" else 1
        gx = -(-(N // w) // threads)
        gy = int(blocks) if blocks is not None else min(-(-M // FUSED_2D_ROWS), GRID_Y_MAX)
        if gy < 1:
            raise KernelInputError(f"blocks must be at least 1, got {blocks}")
        name = "bias_gelu_fused_2d" if path == "vec128" else "bias_gelu_fused_2d_scalar"
        kernel(BIAS_GELU_FUSED_2D, name)((gx, min(gy, GRID_Y_MAX)), (int(threads),),
                                         (x, b, y, np.int64(M), np.int64(N)))
    return path


BIAS_GELU_KERNELS = {"unfused": bias_gelu_unfused, "fused": bias_gelu_fused, "fused_2d": bias_gelu_fused_2d}


def gelu_tanh_reference(u):
    """float64 tanh-GELU, the textbook form 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))."""
    u = np.asarray(u, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return 0.5 * u * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (u + 0.044715 * u ** 3)))


def bias_gelu_reference(xh, bh, round_intermediate: bool):
    """Host reference of y = gelu(x + b[col]) from bf16 bit patterns x [M, N], b [N]: the sum in float64
    (exact for two bf16), or, for the unfused version, the sum rounded to bf16 as its temporary is."""
    xf = bf16.from_bits(np.asarray(xh)).astype(np.float64)
    bfv = bf16.from_bits(np.asarray(bh)).astype(np.float64)
    if round_intermediate:
        with np.errstate(over="ignore", invalid="ignore"):
            s = bf16.round_trip((xf + bfv[None, :]).astype(np.float32)).astype(np.float64)
    else:
        s = xf + bfv[None, :]
    return gelu_tanh_reference(s)


# ------------------------------------------------------------------------------------------ the compilers' versions

TORCH_GELU_ATOL = 1e-6   # PyTorch's gelu is 0.5 u (1 + tanh z): 1 + tanh z cancels for negative u, so the tail
                         # of its output is accurate to about |u| x 2^-24 absolutely, not relatively


def triton_kernels():
    """The module kernels/03-elementwise/06_triton_bias_gelu.py (imported by path, as chapter 04 imports
    its Triton kernels). Raises ImportError where Triton or PyTorch is missing."""
    return python_kernels(TRITON_BIAS_GELU)


def _bias_gelu_eager(F):
    def bias_gelu(x, b):
        return F.gelu(x + b, approximate="tanh")
    return bias_gelu


def verify_bias_gelu_torch(ctx, what: str, run, x, b, *, atol: float = GELU_ATOL):
    """Check `run(xt, bt, yt)`, which writes gelu_tanh(x + b) into the torch view yt of a guarded output,
    for CuPy bf16 inputs x [M, N] and b [N], against the float64 reference with the sum x + b exact; if that
    fails, with the sum rounded to bf16 (as eager PyTorch's temporary is)."""
    M, N = x.shape
    out = GuardedOutput((M, N), "bfloat16")
    run(torch_bf16(x), torch_bf16(b), torch_bf16(out.array))
    xh, bh = x.get(), b.get()
    try:
        ctx.verify(what, out, bias_gelu_reference(xh, bh, round_intermediate=False).reshape(-1), "bfloat16",
                   rtol=GELU_RTOL, atol=atol)
    except CheckFailed:
        ctx.verify(what + " (against x + b rounded to bf16)", out,
                   bias_gelu_reference(xh, bh, round_intermediate=True).reshape(-1), "bfloat16",
                   rtol=GELU_RTOL, atol=atol)


def compiled_bias_gelu(ctx, torch, x, b) -> dict:
    """{kernel name: (fn timing one call, note)} for the compilers' bias + GELU on x [M, N], b [N]:
    "torch_compile", torch.compile (mode "default") of the eager expression, compiled and checked before
    it is timed; "triton", 06_triton_bias_gelu.py, checked on GELU_SHAPES (inputs ~3 N(0,1) and in +-20)
    and at this shape. Either is left out, with a line in ctx.log saying why, where it cannot run."""
    import time
    F = torch.nn.functional
    xt, bt = torch_bf16(x), torch_bf16(b)
    M, N = x.shape
    out = {}
    eager = _bias_gelu_eager(F)
    try:
        t0 = time.perf_counter()
        compiled = torch.compile(eager)                      # mode "default"
        compiled(xt, bt)                                     # the compile happens here, outside any timing
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    except Exception as e:                                   # no working compiler backend on this machine
        ctx.log.append(f"torch.compile of bias + GELU failed ({type(e).__name__}: {str(e)[:200]}): "
                       "no torch_compile record")
    else:
        ctx.log.append(f"torch.compile of bias + GELU at {M}x{N}: compiled before the timing (not counted)")
        verify_bias_gelu_torch(ctx, f"bias_gelu torch_compile {M}x{N}", lambda xt, bt, yt: yt.copy_(compiled(xt, bt)),
                               x, b, atol=TORCH_GELU_ATOL)
        out["torch_compile"] = (lambda: compiled(xt, bt),     # the log stays deterministic: the seconds go here
                                f'torch.compile(mode="default") of F.gelu(x + b, approximate="tanh"), compiled in '
                                f"{seconds:.1f} s before the timing (not counted)")
    try:
        tri = triton_kernels()
    except ImportError as e:
        ctx.log.append(f"Triton bias + GELU skipped: {e}")
        return out
    try:
        tri.bias_gelu_triton(xt[:1], bt)                     # the first launch compiles the kernel
        torch.cuda.synchronize()
    except Exception as e:                                   # Triton installed, but it cannot build or launch here
        ctx.log.append(f"Triton bias + GELU could not run ({type(e).__name__}: {str(e)[:200]}): no triton record")
        return out
    run = lambda xt, bt, yt: tri.bias_gelu_triton(xt, bt, out=yt)   # noqa: E731
    for m, n in GELU_SHAPES:
        for large in (False, True):
            xs = random_bf16((m, n), low=-20.0, high=20.0) if large else random_bf16((m, n), scale=3.0)
            _plant_nans(xs)
            verify_bias_gelu_torch(ctx, f"bias_gelu triton {m}x{n} {'x in +-20' if large else 'x ~ 3 N(0,1)'}",
                                   run, xs, random_bf16(n))
    verify_bias_gelu_torch(ctx, f"bias_gelu triton {M}x{N}", run, x, b)
    yt = torch.empty_like(xt)
    out["triton"] = (lambda: tri.bias_gelu_triton(xt, bt, out=yt), "06_triton_bias_gelu.py")
    return out


# ------------------------------------------------------------------------------------------ lab tool

def sweep_vec(n: int = 1 << 28, widths=(2, 4, 8), blocks_per_sm=(1, 2, 4, 8, 16, 32), progress: bool = True,
              threads: int = 256) -> list[dict]:
    """Time the grid-stride add over vector widths (bf16 per access) x blocks per SM on n elements.

    Each configuration is first checked bit for bit against a GPU reference, then timed with the L2
    flushed before every run. Returns one dict per configuration: vec_width, bytes_per_access,
    blocks_per_sm, blocks, threads, median_ms, spread_ms, gbps (6n bytes over the median).
    """
    import cupy as cp
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    x, b = random_bf16(n), random_bf16(n)
    y = cp.empty(n, dtype=cp.uint16)
    timed = checked_sweep([(w, k) for w in widths for k in blocks_per_sm],
                          lambda w, k: add_vec128_gridstride(x, b, y, vec_width=w, blocks_per_sm=k, threads=threads),
                          y, gpu_add_reference(x, b),
                          lambda w, k: f"add_bf16 grid-stride vec_width={w} blocks_per_sm={k} n={n}",
                          "vector width x blocks per SM", progress)
    return [{"vec_width": w, "bytes_per_access": 2 * w, "blocks_per_sm": k,
             "blocks": _grid(max(1, n // w), threads, k, None), "threads": threads,
             "median_ms": tm.median_ms, "spread_ms": tm.spread_ms,
             "gbps": 6 * n / (tm.median_ms * 1e-3) / 1e9} for (w, k), tm in timed]


def stride_sweep(ctx, n: int = STRIDE_SWEEP_N, strides=STRIDE_SWEEP):
    """Records of op "add_bf16_stride": the strided add at each stride (kernel "stride_0512" for 512: four
    digits, so that the records sort by stride), 6n bytes, with chapter 02's naive kernel on the same arrays
    as the baseline (stride 1 should match it)."""
    import cupy as cp
    x, b = random_bf16(n), random_bf16(n)
    y = cp.empty(n, dtype=cp.uint16)
    ref = gpu_add_reference(x, b)
    naive = bench(lambda: add_naive(x, b, y))
    for s in strides:
        y.fill(np.uint16(0x7FC0))
        add_strided(x, b, y, stride=s)
        if bool((y != ref).any()):
            raise CheckFailed(f"add_bf16 strided stride={s} n={n}: wrong result")
        ctx.log.append(f"ok  add_bf16 strided stride={s} n={n} (bit-exact)")
        t = bench(lambda: add_strided(x, b, y, stride=s))
        yield ctx.record(chapter="03", op="add_bf16_stride", kernel=f"stride_{s:04d}", shape=[n], dtype="bfloat16",
                         bytes=6 * n, flops=n, timing=t, baseline="naive (chapter 02), same n", baseline_timing=naive,
                         ceiling="copy")


# ------------------------------------------------------------------------------------------ checks

def _expect_path(what: str, got: str, want: str, n: int = 1):
    if n and got != want:
        raise CheckFailed(f"{what}: the wrapper took the {got!r} path, expected {want!r}")


def check_adds(ctx):
    for n in CHECK_SIZES:
        verify_add(ctx, f"add_bf16 naive n={n}", add_naive, n)
        verify_add(ctx, f"add_bf16 strided n={n}", add_strided, n)
        for stride in (1, 7, 1024):
            verify_add(ctx, f"add_bf16 strided stride={stride} n={n}",
                       lambda x, b, y: add_strided(x, b, y, stride=stride), n)
        p = verify_add(ctx, f"add_bf16 vec128 n={n}", add_vec128, n)
        _expect_path(f"add_bf16 vec128 n={n}", p, "vec128", n)
        for w in (8, 4, 2):
            for kw in ({}, {"blocks_per_sm": 1}, {"blocks": 1}, {"blocks": 3}):
                grid = " ".join(f"{k}={v}" for k, v in kw.items()) or "default grid"
                what = f"add_bf16 gridstride vec_width={w} {grid} n={n}"
                p = verify_add(ctx, what, lambda x, b, y: add_vec128_gridstride(x, b, y, vec_width=w, **kw), n)
                _expect_path(what, p, f"vec{16 * w}", n)
    # misaligned views: x[1:], b[1:], y[1:] start 2 bytes past a 16-byte boundary -> the scalar fallback
    for n in CHECK_SIZES:
        off = dict(x_off=1, b_off=1, y_off=1)
        verify_add(ctx, f"add_bf16 naive x[1:] n={n}", add_naive, n, **off)
        verify_add(ctx, f"add_bf16 strided x[1:] n={n}", add_strided, n, **off)
        p = verify_add(ctx, f"add_bf16 vec128 x[1:] n={n}", add_vec128, n, **off)
        _expect_path(f"add_bf16 vec128 x[1:] n={n}", p, "scalar", n)
        for w in (8, 4, 2):
            what = f"add_bf16 gridstride vec_width={w} x[1:] n={n}"
            p = verify_add(ctx, what, lambda x, b, y: add_vec128_gridstride(x, b, y, vec_width=w), n, **off)
            _expect_path(what, p, "scalar", n)
    # one misaligned pointer of three is enough to need the fallback; 4-byte alignment suits vec_width 2
    n = 1_000_003
    p = verify_add(ctx, f"add_bf16 vec128 y[1:] only n={n}", add_vec128, n, y_off=1)
    _expect_path(f"add_bf16 vec128 y[1:] only n={n}", p, "scalar")
    for w, want in ((2, "vec32"), (4, "scalar"), (8, "scalar")):
        what = f"add_bf16 gridstride vec_width={w} x[2:], b[2:], y[2:] n={n}"
        p = verify_add(ctx, what, lambda x, b, y: add_vec128_gridstride(x, b, y, vec_width=w, blocks=5), n,
                       x_off=2, b_off=2, y_off=2)
        _expect_path(what, p, want)


def _plant_nans(x):
    """NaN in -> NaN out: a NaN in the middle of x (3 elements or more) and in its last element (15 or more)."""
    flat = x.reshape(-1)
    if flat.size >= 3:
        flat[flat.size // 2] = 0x7FC0
    if flat.size >= 15:
        flat[flat.size - 1] = 0x7FC0


def verify_bias_gelu(ctx, what: str, version: str, M: int, N: int, *, large: bool, offset: int = 0, **kw):
    """Check one bias-GELU version on fresh inputs of shape (M, N); `offset` elements shift x, b and y off
    their 16-byte boundaries (the output before y holds a sentinel that must stay)."""
    size = M * N
    if large:                                  # large magnitudes: GELU's tails, exp over- and underflow
        xbuf = random_bf16(size + offset, low=-20.0, high=20.0)
    else:
        xbuf = random_bf16(size + offset, scale=3.0)
    x = xbuf[offset:].reshape(M, N)
    b = random_bf16(N + offset)[offset:]
    _plant_nans(x)
    out = GuardedOutput((size + offset,), "bfloat16")
    if offset:
        out.array[:offset] = SENTINEL
    y = out.array[offset:].reshape(M, N)
    path = BIAS_GELU_KERNELS[version](x, b, y, **kw)
    ref = bias_gelu_reference(x.get(), b.get(), round_intermediate=(version == "unfused")).reshape(-1)
    ref = np.concatenate([np.full(offset, SENTINEL_VALUE), ref])
    ctx.verify(what, out, ref, "bfloat16", rtol=GELU_RTOL, atol=GELU_ATOL)
    if offset:
        want = "scalar"                        # x, b and y all misaligned: both versions, both passes
    elif N % 8 == 0:
        want = "vec128"
    else:                                      # the bias pass needs N % 8 == 0; the flat GELU pass does not
        want = "mixed" if version == "unfused" else "scalar"
    _expect_path(what, path, want)


def check_bias_gelu(ctx):
    for version in BIAS_GELU_KERNELS:
        for M, N in GELU_SHAPES:
            for large in (False, True):
                tag = "x in +-20" if large else "x ~ 3 N(0,1)"
                verify_bias_gelu(ctx, f"bias_gelu {version} {M}x{N} {tag}", version, M, N, large=large)
            verify_bias_gelu(ctx, f"bias_gelu {version} {M}x{N} blocks=3", version, M, N, large=True, blocks=3)
        for M, N in ((33, 24), (129, 1000), (3, 5)):
            verify_bias_gelu(ctx, f"bias_gelu {version} {M}x{N} x[1:], b[1:], y[1:]", version, M, N,
                             large=True, offset=1)


def benchmarks(ctx):
    import cupy as cp
    check_adds(ctx)
    check_bias_gelu(ctx)
    if not ctx.quick:
        verify_add_huge(ctx, [("add_bf16 strided", add_strided), ("add_bf16 vec128", add_vec128),
                              ("add_bf16 vec128_gridstride", add_vec128_gridstride)])
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        torch = None
        ctx.log.append("torch not installed: chapter 03 recorded without baselines")

    # the add ladder, n = 2^28 (2^26 quick): 6n bytes, n FLOPs
    n = 2**26 if ctx.quick else 2**28
    x, b = random_bf16(n), random_bf16(n)
    y = cp.empty(n, dtype=cp.uint16)
    base = None
    if torch is not None:
        xt, bt, yt = torch_bf16(x), torch_bf16(b), torch_bf16(y)
        base = bench(lambda: torch.add(xt, bt, out=yt))
    for name, fn in ADD_KERNELS.items():
        t = bench(lambda: fn(x, b, y))
        yield ctx.record(chapter="03", op="add_bf16", kernel=name, shape=[n], dtype="bfloat16", bytes=6 * n,
                         flops=n, timing=t, baseline="torch.add" if base is not None else None, baseline_timing=base,
                         ceiling="copy")
    del x, b, y

    # the stride sweep (full runs only: the lab runs its own): `strided` at n = 2^26 for each stride of
    # STRIDE_SWEEP, each checked bit for bit first, against chapter 02's naive kernel on the same arrays
    if not ctx.quick:
        yield from stride_sweep(ctx)

    # bias + GELU, 16384 x 8192 (4096 x 8192 quick). Bytes: the ideal 2MN (read x) + 2MN (write y) + 2N
    # (read b) for both versions; the unfused one moves 8MN + 2N, and is judged on the same ideal bytes.
    # FLOPs: 9 per element, 1 for the bias add and ~8 for tanh-GELU (GELU_FLOPS_PER_ELEMENT).
    M, N = (4096, 8192) if ctx.quick else (16384, 8192)
    x = random_bf16((M, N), scale=3.0)
    b = random_bf16(N)
    y = cp.empty((M, N), dtype=cp.uint16)
    tmp = cp.empty((M, N), dtype=cp.uint16)
    base, base_name = None, None
    if torch is not None:
        xt, bt = torch_bf16(x), torch_bf16(b)
        base = bench(lambda: F.gelu(xt + bt, approximate="tanh"))
        base_name = 'torch.nn.functional.gelu(x + b, approximate="tanh")'
    runs = {"unfused": lambda: bias_gelu_unfused(x, b, y, tmp), "fused": lambda: bias_gelu_fused(x, b, y),
            "fused_2d": lambda: bias_gelu_fused_2d(x, b, y)}
    notes = {"unfused": "moves 8MN + 2N bytes (a bf16 temporary written and read); judged on 4MN + 2N"}

    def rec(name, t, note=""):
        return ctx.record(chapter="03", op="bias_gelu", kernel=name, shape=[M, N], dtype="bfloat16",
                          bytes=4 * M * N + 2 * N, flops=GELU_FLOPS_PER_ELEMENT * M * N, timing=t,
                          baseline=base_name, baseline_timing=base, ceiling="copy", note=note)

    for name, fn in runs.items():
        if fn() != "vec128":
            raise CheckFailed(f"bias_gelu {name} {M}x{N}: the timed run did not take the vectorised path")
        yield rec(name, bench(fn), notes.get(name, ""))

    # the same op from the compilers, on the same inputs: torch.compile of the eager expression and a short
    # Triton kernel, each checked at this shape (Triton also on GELU_SHAPES) before it is timed
    if torch is None:
        return
    for name, (fn, note) in compiled_bias_gelu(ctx, torch, x, b).items():
        yield rec(name, bench(fn), note)
