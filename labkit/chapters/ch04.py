"""Chapter 04: reductions. RMSNorm, LayerNorm, softmax (three passes -> online -> in registers), and
shared-memory bank conflicts, against torch (F.rms_norm, F.layer_norm, torch.softmax) and a plain Triton
kernel of the same one-row-per-program shape.

bf16 tensors are CuPy uint16 arrays of bit patterns (labkit.bf16). Every row-wise wrapper takes x of
shape (M, N) and writes y of the same shape; it picks the launch from N and sends rows its fast kernel
cannot hold (N not a multiple of 8, or longer than the registers hold) to a kernel that loops over the row,
so every N works.
"""
from __future__ import annotations

import sys

import numpy as np

from ..measure.checks import GuardedOutput, expect
from ..measure.compile import kernel, python_kernels
from ..errors import KernelInputError
from ..measure.timing import bench

HEADLINE = {"rmsnorm": "65536x4096", "layernorm": "65536x4096", "softmax": "65536x4096", "smem_transpose": "8192x8192"}   # the shape the book's plain figures of each op refer to

RMSNORM_BLOCK_SMEM = "04-reductions/01_rmsnorm_block_smem.cu"
RMSNORM_REGS = "04-reductions/02_rmsnorm_regs.cu"
LAYERNORM_TWOPASS = "04-reductions/03_layernorm_twopass.cu"
LAYERNORM_WELFORD = "04-reductions/04_layernorm_welford.cu"
LAYERNORM_REGS = "04-reductions/10_layernorm_regs.cu"
SOFTMAX_THREE_PASS = "04-reductions/05_softmax_three_pass.cu"
SOFTMAX_ONLINE = "04-reductions/06_softmax_online.cu"
SOFTMAX_REGS = "04-reductions/07_softmax_regs.cu"
BANK_CONFLICTS = "04-reductions/08_bank_conflicts.cu"
TRITON_SOURCE = "04-reductions/09_triton_softmax_rmsnorm.py"

RMS_EPS = 1e-6                 # F.rms_norm's eps in this chapter
LN_EPS = 1e-5                  # F.layer_norm's default
BF16_MAX = 3.3895313892515355e38

# Compile-time vectors (16 bytes = 8 bf16) per thread of the register kernels: the defaults of the
# VECS_PER_THREAD / LONG_VECS_PER_THREAD macros in the .cu files, and the largest thread counts their
# __launch_bounds__ allow.
RMS_VPT, RMS_MAX_BLOCK = 4, 1024               # rmsnorm_regs: __launch_bounds__(1024, 2)
WELFORD_VPT, WELFORD_MAX_BLOCK = 2, 1024       # layernorm_welford: __launch_bounds__(1024, 2)
LN_REGS_VPT, LN_REGS_MAX_BLOCK = 4, 512        # layernorm_regs: __launch_bounds__(512, 3)
SOFTMAX_VPT, SOFTMAX_MAX_BLOCK = 4, 256        # softmax_regs: __launch_bounds__(256)
SOFTMAX_LONG_VPT, SOFTMAX_LONG_MAX_BLOCK = 8, 512   # softmax_regs_long: __launch_bounds__(512, 2)
CHUNKED_MAX_BLOCK = 512        # rmsnorm_regs_chunked, layernorm_welford_chunked, layernorm_twopass
ROW_MAX_BLOCK = 1024           # softmax_three_pass, softmax_online
MIN_BLOCK = 256                # register kernels put several short rows in one block of at least this

RMSNORM_VERSIONS = ("block_smem", "regs")
LAYERNORM_VERSIONS = ("twopass", "welford", "regs")
SOFTMAX_VERSIONS = ("three_pass", "online", "regs")
TRANSPOSE_VERSIONS = ("conflicted", "padded")

# correctness shapes: empty, single elements, primes, N not a multiple of 8 (scalar paths), N just past
# a multiple of 8, several rows per block (N = 256, 1000) with M not a multiple of the rows per block,
# the largest rows each register kernel holds (8192, 32760, 32768) and rows longer than that (chunked)
CHECK_SHAPES = [(0, 4096), (3, 0), (1, 1), (3, 7), (33, 256), (7, 1000), (5, 4096), (17, 4095), (2, 4104),
                (9, 8192), (3, 8191), (5, 16384), (3, 32760), (2, 32768), (1, 65536), (4, 100000)]
NUMERICS_N = [1, 7, 4096, 4095, 8192, 32768, 100000]
TRANSPOSE_SHAPES = [(0, 5), (1, 1), (33, 65), (1000, 777)]
TRITON_MAX_N = 32768           # the plain Triton kernels hold a row in registers; checked up to here


# ---------------------------------------------------------------------------------------------- helpers

def _vpt_options(macro: str, vpt: int, default: int) -> tuple:
    return () if vpt == default else (f"-D{macro}={int(vpt)}",)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _rows(name: str, x, align: int):
    expect(name, x, dtype=np.uint16, ndim=2, align=align)
    M, N = (int(s) for s in x.shape)
    if M >= 2 ** 31 or N >= 2 ** 31:
        raise KernelInputError(f"{name} has shape {x.shape}: rows and columns must each be below 2^31")
    return M, N


def _row_inputs(x, y, params=()):
    """Validate x (M, N), y (M, N) and the per-column parameters (N,) of a row-wise op; return M, N.
    16-byte alignment is required when N % 8 == 0 (the kernels then use 16-byte vectors)."""
    expect("x", x, dtype=np.uint16, ndim=2, align=2)
    align = 16 if x.shape[1] % 8 == 0 else 2
    M, N = _rows("x", x, align)
    expect("y", y, dtype=np.uint16, shape=(M, N), align=align)
    for pname, p in params:
        expect(pname, p, dtype=np.uint16, shape=(N,), align=align)
    return M, N


def _regs_plan(N: int, vpt: int, max_block: int):
    """(tpr_log2, block) for a register kernel holding `vpt` vectors per thread, or None if it cannot
    hold the row (N % 8 != 0, or more than vpt * 8 * max_block elements)."""
    if N % 8:
        return None
    need = -(-(N // 8) // vpt)                  # threads needed for the row's vectors
    tpr = max(32, _next_pow2(need))
    if tpr > max_block:
        return None
    return tpr.bit_length() - 1, max(tpr, min(MIN_BLOCK, max_block))


def _row_threads(N: int, max_block: int) -> int:
    """Threads for a one-block-per-row kernel that loops over the row, 4 loads in flight per thread."""
    units = N // 8 if N % 8 == 0 else N
    return min(max_block, max(32, _next_pow2(-(-units // 4))))


def _i32(v):
    return np.int32(v)


# --------------------------------------------------------------------------------------------- wrappers

def rmsnorm(x, w, y, version: str = "regs", eps: float = RMS_EPS, *, vecs_per_thread: int | None = None):
    """y = x * rsqrt(mean(x^2, axis=-1) + eps) * w for x, y of shape (M, N) and w of shape (N,), bf16.

    version: "block_smem" (textbook shared-memory tree, reads x twice) or "regs" (row in registers;
    rows it cannot hold go to its chunked kernel). vecs_per_thread overrides the register kernel's
    compile-time VECS_PER_THREAD (for experiments)."""
    M, N = _row_inputs(x, y, [("w", w)])
    if version not in RMSNORM_VERSIONS:
        raise KernelInputError(f"unknown rmsnorm version {version!r}; choose one of {RMSNORM_VERSIONS}")
    if M == 0 or N == 0:
        return y
    if version == "block_smem":
        k = kernel(RMSNORM_BLOCK_SMEM, "rmsnorm_block_smem")
        k((M,), (256,), (x, w, y, _i32(M), _i32(N), np.float32(eps)))
        return y
    vpt = vecs_per_thread or RMS_VPT
    plan = _regs_plan(N, vpt, RMS_MAX_BLOCK)
    if plan is not None:
        tpr_log2, block = plan
        rows_per_block = block >> tpr_log2
        k = kernel(RMSNORM_REGS, "rmsnorm_regs", _vpt_options("VECS_PER_THREAD", vpt, RMS_VPT))
        k((-(-M // rows_per_block),), (block,), (x, w, y, _i32(M), _i32(N), np.float32(eps), _i32(tpr_log2)))
    else:
        k = kernel(RMSNORM_REGS, "rmsnorm_regs_chunked")
        k((M,), (_row_threads(N, CHUNKED_MAX_BLOCK),), (x, w, y, _i32(M), _i32(N), np.float32(eps)))
    return y


def layernorm(x, w, b, y, version: str = "welford", eps: float = LN_EPS, *, vecs_per_thread: int | None = None):
    """y = (x - mean) * rsqrt(var + eps) * w + b per row (biased variance, as F.layer_norm), bf16.

    version: "twopass" (mean, then variance around it, re-reading the row), "welford" (row in
    registers, Welford + Chan merge) or "regs" (row in registers, mean then variance around it, two
    passes over the registers); rows the register kernels cannot hold go to Welford's chunked kernel.
    vecs_per_thread overrides the register kernel's compile-time VECS_PER_THREAD (for experiments)."""
    M, N = _row_inputs(x, y, [("w", w), ("b", b)])
    if version not in LAYERNORM_VERSIONS:
        raise KernelInputError(f"unknown layernorm version {version!r}; choose one of {LAYERNORM_VERSIONS}")
    if M == 0 or N == 0:
        return y
    args_tail = (_i32(M), _i32(N), np.float32(eps))
    if version == "twopass":
        k = kernel(LAYERNORM_TWOPASS, "layernorm_twopass")
        k((M,), (_row_threads(N, CHUNKED_MAX_BLOCK),), (x, w, b, y) + args_tail)
        return y
    source, name, default_vpt, max_block = ((LAYERNORM_REGS, "layernorm_regs", LN_REGS_VPT, LN_REGS_MAX_BLOCK)
                                            if version == "regs" else
                                            (LAYERNORM_WELFORD, "layernorm_welford", WELFORD_VPT, WELFORD_MAX_BLOCK))
    vpt = vecs_per_thread or default_vpt
    plan = _regs_plan(N, vpt, max_block)
    if plan is not None:
        tpr_log2, block = plan
        k = kernel(source, name, _vpt_options("VECS_PER_THREAD", vpt, default_vpt))
        k((-(-M // (block >> tpr_log2)),), (block,), (x, w, b, y) + args_tail + (_i32(tpr_log2),))
    else:
        k = kernel(LAYERNORM_WELFORD, "layernorm_welford_chunked")
        k((M,), (_row_threads(N, CHUNKED_MAX_BLOCK),), (x, w, b, y) + args_tail)
    return y


def softmax(x, y, version: str = "regs", *, vecs_per_thread: int | None = None,
            long_vecs_per_thread: int | None = None, use_long: bool | None = None):
    """y = softmax(x, axis=-1) for x, y of shape (M, N), bf16 (fp32 inside).

    version: "three_pass" (max, sum, write: three reads), "online" (running max and normaliser: two
    reads, any N) or "regs" (row in registers, one read: softmax_regs up to N = 8192, softmax_regs_long
    up to 32768; other rows go to the online kernel). use_long forces (True) or forbids (False) the
    long build for experiments; vecs_per_thread / long_vecs_per_thread override their macros."""
    M, N = _row_inputs(x, y)
    if version not in SOFTMAX_VERSIONS:
        raise KernelInputError(f"unknown softmax version {version!r}; choose one of {SOFTMAX_VERSIONS}")
    if M == 0 or N == 0:
        return y
    if version == "three_pass":
        k = kernel(SOFTMAX_THREE_PASS, "softmax_three_pass")
        k((M,), (_row_threads(N, ROW_MAX_BLOCK),), (x, y, _i32(M), _i32(N)))
        return y
    if version == "regs":
        vpt = vecs_per_thread or SOFTMAX_VPT
        lvpt = long_vecs_per_thread or SOFTMAX_LONG_VPT
        short = None if use_long else _regs_plan(N, vpt, SOFTMAX_MAX_BLOCK)
        if short is not None:
            tpr_log2, block = short
            k = kernel(SOFTMAX_REGS, "softmax_regs", _vpt_options("VECS_PER_THREAD", vpt, SOFTMAX_VPT))
            k((-(-M // (block >> tpr_log2)),), (block,), (x, y, _i32(M), _i32(N), _i32(tpr_log2)))
            return y
        long = None if use_long is False else _regs_plan(N, lvpt, SOFTMAX_LONG_MAX_BLOCK)
        if long is not None:
            tpr_log2, block = long
            k = kernel(SOFTMAX_REGS, "softmax_regs_long",
                        _vpt_options("LONG_VECS_PER_THREAD", lvpt, SOFTMAX_LONG_VPT))
            k((-(-M // (block >> tpr_log2)),), (block,), (x, y, _i32(M), _i32(N), _i32(tpr_log2)))
            return y
    k = kernel(SOFTMAX_ONLINE, "softmax_online")
    k((M,), (_row_threads(N, ROW_MAX_BLOCK),), (x, y, _i32(M), _i32(N)))
    return y


def transpose(x, y, version: str = "padded"):
    """y = x.T for fp32 x of shape (M, N) and y of shape (N, M), through a 32 x 32 shared-memory tile
    ("conflicted": tile[32][32], "padded": tile[32][33])."""
    expect("x", x, dtype=np.float32, ndim=2, align=4)
    M, N = (int(s) for s in x.shape)
    expect("y", y, dtype=np.float32, shape=(N, M), align=4)
    if version not in TRANSPOSE_VERSIONS:
        raise KernelInputError(f"unknown transpose version {version!r}; choose one of {TRANSPOSE_VERSIONS}")
    if M >= 2 ** 31 or N >= 2 ** 31:
        raise KernelInputError(f"x has shape {x.shape}: each side must be below 2^31")
    grid = (-(-N // 32), -(-M // 32))
    if grid[1] > 65535:
        raise KernelInputError(f"x has {M} rows: at most {65535 * 32} (the grid's y dimension)")
    if M == 0 or N == 0:
        return y
    k = kernel(BANK_CONFLICTS, f"transpose_{version}")
    k(grid, (32, 8), (x, y, _i32(M), _i32(N)))
    return y


# ----------------------------------------------------------------------------------- Triton and torch

def triton_kernels():
    """The module kernels/04-reductions/09_triton_softmax_rmsnorm.py (imported by path; it is not a
    package). Raises ImportError where Triton or PyTorch is missing."""
    return python_kernels(TRITON_SOURCE)


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def as_torch_bf16(a):
    """A torch bf16 view (zero copy) of a CuPy uint16 array of bf16 bit patterns."""
    import cupy as cp
    import torch
    return torch.from_dlpack(a.view(cp.int16)).view(torch.bfloat16)   # int16: DLPack's surest 16-bit type


def _torch_baselines(torch, tx, tw, tb):
    F = torch.nn.functional
    N = tx.shape[1]
    return {
        "rmsnorm": ("torch.nn.functional.rms_norm", lambda: F.rms_norm(tx, (N,), tw, RMS_EPS)),
        "layernorm": ("torch.nn.functional.layer_norm", lambda: F.layer_norm(tx, (N,), tw, tb, LN_EPS)),
        "softmax": ("torch.softmax", lambda: torch.softmax(tx, -1)),
    }


# --------------------------------------------------------------------------------------- references

def ref_rmsnorm(x, w, eps=RMS_EPS):
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + eps) * w


def ref_layernorm(x, w, b, eps=LN_EPS):
    if x.size == 0:
        return x.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        mean = np.mean(x, axis=1, keepdims=True)
        var = np.mean((x - mean) ** 2, axis=1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w + b


def ref_softmax(x):
    """float64 softmax with torch's conventions spelled out: a row with a NaN, or with every entry
    -inf, is all NaN; -inf entries are 0."""
    out = np.empty_like(x)
    with np.errstate(invalid="ignore", over="ignore"):
        for r in range(x.shape[0]):
            row = x[r]
            if np.isnan(row).any() or (row.size and np.isneginf(row).all()) or np.isposinf(row).any():
                out[r] = np.nan
                continue
            e = np.exp(row - row.max()) if row.size else row
            out[r] = e / e.sum() if row.size else row
    return out


def bf16_random(cp, shape, scale=1.0, offset=0.0):
    """Fresh random bf16 bit patterns (never zeros), and their exact values as float64 on the host."""
    from ..measure import bf16
    f = cp.random.standard_normal(shape, dtype=cp.float32) * np.float32(scale) + np.float32(offset)
    bits = bf16.to_bits(f)
    return bits, bf16.from_bits(bits).get().astype(np.float64)


def bf16_from_host(cp, a64):
    from ..measure import bf16
    bits = bf16.to_bits(cp.asarray(a64.astype(np.float32)))
    return bits, bf16.from_bits(bits).get().astype(np.float64)


def _special_softmax_rows(rng, N):
    """8 rows that probe softmax numerics (float64, before rounding to bf16)."""
    rows = rng.standard_normal((8, N))
    rows[0] = -np.inf                                   # fully -inf: NaN, as torch.softmax
    rows[1, : (3 * N) // 4] = -np.inf                   # a long masked prefix (whole threads see only -inf)
    rows[2, N // 2] = np.nan                            # one NaN: the row is NaN
    rows[3] = rng.uniform(-3e4, 3e4, N)                 # magnitudes up to 3e4
    rows[4] *= 1e4                                      # +-1e4
    rows[5, 0] = BF16_MAX                               # the bf16 extremes
    rows[5, N - 1] = -BF16_MAX if N > 1 else BF16_MAX
    rows[6, ::2] = -np.inf                              # scattered -inf entries
    rows[7] = np.nan                                    # all NaN
    return rows


def _special_norm_rows(rng, N):
    """6 rows that probe RMSNorm / LayerNorm numerics."""
    rows = rng.standard_normal((6, N))
    rows[0] = rng.uniform(-3e4, 3e4, N)                 # magnitudes up to 3e4
    rows[1] = 1000.0 + 10.0 * rng.standard_normal(N)    # |mean| >> std: E[x^2] - mean^2 would fail
    rows[2, N // 2] = np.nan                            # a NaN: the row is NaN
    rows[3] *= 1e-3                                     # tiny values: eps matters
    rows[4] *= 1e4
    return rows


# -------------------------------------------------------------------------------------------- checks

def _check_rows_op(ctx, cp, op, versions, run, x_bits, x64, params, dtype="bfloat16", label=""):
    """Run each version on x and verify against the float64 reference."""
    M, N = x64.shape
    w_bits, w64 = params.get("w", (None, None))
    b_bits, b64 = params.get("b", (None, None))
    if op == "rmsnorm":
        ref = ref_rmsnorm(x64, w64)
    elif op == "layernorm":
        ref = ref_layernorm(x64, w64, b64)
    else:
        ref = ref_softmax(x64)
    for v in versions:
        out = GuardedOutput((M, N), dtype)
        run(v, x_bits, w_bits, b_bits, out.array)
        ctx.verify(f"{op} {v} {M}x{N}{label}", out, ref, dtype)


def _run_ours(op):
    if op == "rmsnorm":
        return lambda v, x, w, b, y: rmsnorm(x, w, y, v)
    if op == "layernorm":
        return lambda v, x, w, b, y: layernorm(x, w, b, y, v)
    return lambda v, x, w, b, y: softmax(x, y, v)


def _run_triton(op, tri):
    if op == "rmsnorm":
        return lambda v, x, w, b, y: tri.rmsnorm_triton(as_torch_bf16(x), as_torch_bf16(w), RMS_EPS,
                                                        out=as_torch_bf16(y))
    return lambda v, x, w, b, y: tri.softmax_triton(as_torch_bf16(x), out=as_torch_bf16(y))


OPS = {"rmsnorm": RMSNORM_VERSIONS, "layernorm": LAYERNORM_VERSIONS, "softmax": SOFTMAX_VERSIONS}


def check_all(ctx, tri=None):
    """Every kernel on CHECK_SHAPES (random inputs) and on the numerics rows, against float64."""
    import cupy as cp
    rng = np.random.default_rng()
    for M, N in CHECK_SHAPES:
        x_bits, x64 = bf16_random(cp, (M, N))
        params = {"w": bf16_random(cp, (N,)), "b": bf16_random(cp, (N,))}
        for op, versions in OPS.items():
            _check_rows_op(ctx, cp, op, versions, _run_ours(op), x_bits, x64, params)
            if tri is not None and op in ("rmsnorm", "softmax") and 0 < M * N and N <= TRITON_MAX_N:
                _check_rows_op(ctx, cp, op, ("triton",), _run_triton(op, tri), x_bits, x64, params)
    for N in NUMERICS_N:
        params = {"w": bf16_random(cp, (N,)), "b": bf16_random(cp, (N,))}
        x_bits, x64 = bf16_from_host(cp, _special_softmax_rows(rng, N))
        _check_rows_op(ctx, cp, "softmax", SOFTMAX_VERSIONS, _run_ours("softmax"), x_bits, x64, params,
                       label=" (numerics: -inf, NaN, +-3e4, bf16 max)")
        x_bits, x64 = bf16_from_host(cp, _special_norm_rows(rng, N))
        for op in ("rmsnorm", "layernorm"):
            _check_rows_op(ctx, cp, op, OPS[op], _run_ours(op), x_bits, x64, params,
                           label=" (numerics: NaN, +-3e4, offset mean, tiny)")
    for M, N in TRANSPOSE_SHAPES:
        x = cp.random.standard_normal((M, N), dtype=cp.float32)
        ref = x.get().T
        for v in TRANSPOSE_VERSIONS:
            out = GuardedOutput((N, M), "float32")
            transpose(x, out.array, v)
            ctx.verify(f"transpose {v} {M}x{N}", out, ref, "float32", rtol=0, atol=0)


# ------------------------------------------------------------------------------------------ benchmarks

# FLOPs per element (counted as the math is written, exp as one operation):
#   rmsnorm   4: x*x and its sum (2), then x * rstd * w (2)
#   layernorm 8: the sum for the mean (1), x - mean, its square and sum (3), (x - mean) * rstd (2: the
#                subtraction is redone), * w + b (2)
#   softmax   5: max (1), x - max (1), exp (1), sum (1), scale by 1/sum (1)
FLOPS_PER_ELEMENT = {"rmsnorm": 4, "layernorm": 8, "softmax": 5}


def op_bytes(op: str, M: int, N: int) -> int:
    """Bytes that must move: x read once, y written once (bf16), the per-column parameters once."""
    params = {"rmsnorm": 1, "layernorm": 2, "softmax": 0}[op]
    return 2 * 2 * M * N + 2 * params * N


def _warm_bench(fn, **kw):
    fn()                      # compile / JIT outside the timed region
    return bench(fn, **kw)


def benchmarks(ctx):
    import cupy as cp
    torch = _torch()
    tri, tri_note = None, ""
    try:
        tri = triton_kernels()
    except ImportError as e:
        tri_note = f"Triton records skipped: {e}"
        ctx.log.append(tri_note)

    check_all(ctx, tri)

    def rec(op, kernel, M, N, t, base_name, base_t, note=""):
        return ctx.record(chapter="04", op=op, kernel=kernel, shape=[M, N], dtype="bfloat16",
                          bytes=op_bytes(op, M, N), flops=FLOPS_PER_ELEMENT[op] * M * N, timing=t,
                          baseline=base_name, baseline_timing=base_t, ceiling="copy", note=note)

    # ---- 65536 x 4096 (8192 x 4096 quick): rmsnorm, layernorm, softmax
    M, N = (8192, 4096) if ctx.quick else (65536, 4096)
    x, _ = bf16_random(cp, (M, N))
    w, _ = bf16_random(cp, (N,))
    b, _ = bf16_random(cp, (N,))
    y = cp.empty_like(x)
    base = {}
    if torch is not None:
        tx, tw, tb, ty = as_torch_bf16(x), as_torch_bf16(w), as_torch_bf16(b), as_torch_bf16(y)
        for op, (name, fn) in _torch_baselines(torch, tx, tw, tb).items():
            base[op] = (name, _warm_bench(fn))
    no_base = (None, None)

    for v in RMSNORM_VERSIONS:
        t = _warm_bench(lambda: rmsnorm(x, w, y, v))
        yield rec("rmsnorm", v, M, N, t, *base.get("rmsnorm", no_base))
    if tri is not None:
        t = _warm_bench(lambda: tri.rmsnorm_triton(tx, tw, RMS_EPS, out=ty))
        yield rec("rmsnorm", "triton", M, N, t, *base.get("rmsnorm", no_base))
    for v in LAYERNORM_VERSIONS:
        t = _warm_bench(lambda: layernorm(x, w, b, y, v))
        yield rec("layernorm", v, M, N, t, *base.get("layernorm", no_base))
    for v in SOFTMAX_VERSIONS:
        t = _warm_bench(lambda: softmax(x, y, v))
        yield rec("softmax", v, M, N, t, *base.get("softmax", no_base))
    if tri is not None:
        t = _warm_bench(lambda: tri.softmax_triton(tx, out=ty))
        yield rec("softmax", "triton", M, N, t, *base.get("softmax", no_base))
    del x, y, w, b
    if torch is not None:
        del tx, tw, tb, ty

    # ---- softmax on long rows: 16384 x 32768 (2048 x 32768 quick)
    M, N = (2048, 32768) if ctx.quick else (16384, 32768)
    x, _ = bf16_random(cp, (M, N))
    y = cp.empty_like(x)
    sbase = no_base
    if torch is not None:
        tx, ty = as_torch_bf16(x), as_torch_bf16(y)
        sbase = ("torch.softmax", _warm_bench(lambda: torch.softmax(tx, -1)))
    for v in ("online", "regs"):
        t = _warm_bench(lambda: softmax(x, y, v))
        yield rec("softmax", v, M, N, t, *sbase)
    if tri is not None:
        t = _warm_bench(lambda: tri.softmax_triton(tx, out=ty))
        yield rec("softmax", "triton", M, N, t, *sbase)
    del x, y
    if torch is not None:
        del tx, ty

    # ---- bank conflicts: fp32 transpose through shared memory, 8192 x 8192 (4096 x 4096 quick)
    n = 4096 if ctx.quick else 8192
    a = cp.random.standard_normal((n, n), dtype=cp.float32)
    at = cp.empty((n, n), dtype=cp.float32)
    tbase = _warm_bench(lambda: cp.ascontiguousarray(a.T))
    for v in TRANSPOSE_VERSIONS:
        t = _warm_bench(lambda: transpose(a, at, v))
        yield ctx.record(chapter="04", op="smem_transpose", kernel=v, shape=[n, n], dtype="float32",
                         bytes=2 * 4 * n * n, flops=0, timing=t, baseline="cupy.ascontiguousarray(x.T)",
                         baseline_timing=tbase, ceiling="copy")
    del a, at
    cp.get_default_memory_pool().free_all_blocks()


# --------------------------------------------------------------------------------------------- the lab

SWEEP_LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def sweep_row_lengths(lengths=SWEEP_LENGTHS, total_elements: int = 2 ** 28, progress: bool = True,
                      target_ms: float = 60.0) -> dict:
    """GB/s of every kernel of the chapter (and torch's and Triton's, where importable) as the row length
    N varies with M * N = total_elements fixed. Returns {"op.kernel": {N: GB/s}}; Triton only up to
    N = 32768 (its rows live in registers)."""
    import cupy as cp
    from ..measure.progress import tqdm
    torch = _torch()
    try:
        tri = triton_kernels()
    except ImportError:
        tri = None
    runs = []   # (label, op, factory(x, w, b, y, tx, tw, tb, ty) -> fn)
    for v in RMSNORM_VERSIONS:
        runs.append((f"rmsnorm.{v}", "rmsnorm", lambda x, w, b, y, t, v=v: (lambda: rmsnorm(x, w, y, v))))
    for v in LAYERNORM_VERSIONS:
        runs.append((f"layernorm.{v}", "layernorm", lambda x, w, b, y, t, v=v: (lambda: layernorm(x, w, b, y, v))))
    for v in SOFTMAX_VERSIONS:
        runs.append((f"softmax.{v}", "softmax", lambda x, w, b, y, t, v=v: (lambda: softmax(x, y, v))))
    if torch is not None:
        for op in ("rmsnorm", "layernorm", "softmax"):
            runs.append((f"{op}.torch", op, lambda x, w, b, y, t, op=op: _torch_baselines(torch, *t[:3])[op][1]))
    if tri is not None:
        runs.append(("rmsnorm.triton", "rmsnorm",
                     lambda x, w, b, y, t: (lambda: tri.rmsnorm_triton(t[0], t[1], RMS_EPS, out=t[3]))))
        runs.append(("softmax.triton", "softmax", lambda x, w, b, y, t: (lambda: tri.softmax_triton(t[0], out=t[3]))))
    out: dict = {label: {} for label, _, _ in runs}
    bar = tqdm(total=len(lengths) * len(runs), desc="row lengths", disable=not progress, file=sys.stdout)
    for N in lengths:
        M = max(1, total_elements // N)
        x, _ = bf16_random(cp, (M, N))
        w, _ = bf16_random(cp, (N,))
        b, _ = bf16_random(cp, (N,))
        y = cp.empty_like(x)
        t = tuple(as_torch_bf16(a) for a in (x, w, b, y)) if torch is not None else None
        for label, op, make in runs:
            bar.set_postfix_str(f"N={N} {label}")
            if label.endswith(".triton") and N > TRITON_MAX_N:
                out[label][N] = float("nan")
            else:
                tm = _warm_bench(make(x, w, b, y, t), target_ms=target_ms)
                out[label][N] = op_bytes(op, M, N) / (tm.median_ms * 1e-3) / 1e9
            bar.update(1)
        del x, w, b, y, t
    bar.close()
    cp.get_default_memory_pool().free_all_blocks()
    return out
