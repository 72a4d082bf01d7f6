"""Chapter 10's capstone: cross-entropy forward and backward over bf16 logits, against PyTorch (eager and
torch.compile) and a copy of the bytes a gradient-writing kernel must move.

    loss[r] = lse_r - x[r, t_r]        lse_r = log sum_j exp(x[r, j])
    grad[r, j] = (exp(x[r, j] - lse_r) - [j == t_r]) * scale          scale = 1 / (rows not ignored)

so that grad is the gradient of loss_mean = scale * sum_r loss[r], PyTorch's F.cross_entropy with its
default reduction="mean" and ignore_index=-100 (an ignored row: loss 0, gradient 0).

Kernels (kernels/10-recap/):
- 01_ce_two_pass.cu  `ce_lse` then `ce_grad`: a row reduction and an elementwise kernel (version "two_pass");
- 02_ce_fused.cu     `ce_fused`: both passes of a row in one block, a persistent grid (one or two blocks per
                     SM by row length, fused_build), the second read from the L2 (version "fused").

bf16 tensors are CuPy uint16 arrays of bit patterns (labkit.bf16). `cross_entropy` checks its arguments and
launches; `launcher` returns a zero-argument function for timing.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import CheckFailed, KernelInputError
from ..measure import bf16
from ..measure.checks import GuardedOutput, expect
from ..measure.compile import kernel, launch_config
from ..measure.timing import bench_interleaved

OP = "cross_entropy"
HEADLINE = {OP: "4096x128256"}            # N x V: Llama 3's vocabulary, 4096 tokens
SHAPES = [(4096, 128256), (16384, 32000)]
QUICK_SHAPES = [(512, 128256), (2048, 32000)]
IGNORE_INDEX = -100
GRAD_UNITS_PER_THREAD = 4                 # ce_grad's grid: units of work per thread (launch_config out[2])

TWO_PASS = "10-recap/01_ce_two_pass.cu"
FUSED = "10-recap/02_ce_fused.cu"
BASELINE = "torch eager"

# correctness cases: (N, V, ignored rows): one element, a scalar-path V (not a multiple of 8), V just past a
# multiple of 8, several rows of a short vocabulary, long rows in vectors, and rows longer than the L2
# window at one block per SM, with ignored rows and the target at both ends of the row
CHECK_CASES = [(1, 1, 0), (3, 7, 1), (5, 1003, 2), (33, 256, 5), (7, 32000, 2), (4, 128256, 1), (300, 4104, 37)]


@dataclasses.dataclass(frozen=True)
class Version:
    name: str
    path: str
    kernels: tuple


VERSIONS = {"two_pass": Version("two_pass", TWO_PASS, ("ce_lse", "ce_grad")),
            "fused": Version("fused", FUSED, ("ce_fused",))}
BEST = "fused"


# ------------------------------------------------------------------------------------------- reference

def reference(x_bits, target, ignore_index: int = IGNORE_INDEX):
    """fp64 (loss (N,), lse (N,), grad (N, V), loss_mean) of bf16 logits given as uint16 bit patterns, with
    scale = 1 / rows not ignored (NaN mean and zero gradient when every row is ignored). NumPy arrays give
    NumPy results, CuPy arrays CuPy results (the grader's large cases stay on the GPU)."""
    xp = _xp(x_bits)
    x = bf16.from_bits(x_bits).astype(xp.float64)
    t = xp.asarray(target).astype(xp.int64)
    N, V = x.shape
    keep = t != ignore_index
    rows = xp.arange(N)
    if V == 0:
        return xp.zeros(N), xp.full(N, -xp.inf), x.copy(), float("nan")
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + xp.log(xp.exp(x - m).sum(axis=1))
    x_t = xp.where(keep, x[rows, xp.where(keep, t, 0)], 0.0)
    loss = xp.where(keep, lse - x_t, 0.0)
    n = int(keep.sum())
    scale = 1.0 / n if n else 0.0
    grad = xp.exp(x - lse[:, None])
    grad[rows[keep], t[keep]] -= 1.0
    grad *= scale
    grad[~keep] = 0.0
    return loss, lse, grad, (float(loss.sum()) * scale if n else float("nan"))


def _xp(a):
    try:
        import cupy as cp
        return cp.get_array_module(a)
    except ImportError:
        return np


def mismatches(loss, lse, grad, mean, ref) -> list[str]:
    """What is wrong with the outputs (float64 arrays, NumPy or CuPy like `ref`) against `reference`'s, one
    text per output. mean None: loss_mean not checked (a check of a few rows, or a kernel without it)."""
    xp = _xp(grad)
    r_loss, r_lse, r_grad, r_mean = ref
    out = []
    for name, got, want, rtol, atol in (("loss", loss, r_loss, 1e-4, 1e-4), ("lse", lse, r_lse, 1e-5, 1e-5)):
        bad = ~xp.isclose(got, want, rtol=rtol, atol=atol) | xp.isnan(got)
        if bool(bad.any()):
            i = int(xp.flatnonzero(bad)[0])
            out.append(f"{name}: {int(bad.sum())} of {bad.size} rows wrong; first row {i}: expected "
                       f"{float(want[i]):.6g}, got {float(got[i]):.6g}")
    if grad.size:
        # bf16 output: half an ulp of the value, plus the rounding of a gradient near 0 (p ~ scale * 2^-9)
        tol = 2.0 ** -8 * xp.abs(r_grad) + 2.0 ** -20 * float(xp.abs(r_grad).max())
        bad = ~(xp.abs(grad - r_grad) <= tol) | xp.isnan(grad)
        if bool(bad.any()):
            k = int(xp.flatnonzero(bad)[0])
            i, j = divmod(k, grad.shape[1])
            out.append(f"grad: {int(bad.sum())} of {bad.size} elements wrong; first [{i}, {j}]: expected "
                       f"{float(r_grad[i, j]):.6g}, got {float(grad[i, j]):.6g}")
    if mean is not None and not np.isnan(r_mean) and not np.isclose(mean, r_mean, rtol=1e-4, atol=1e-6):
        out.append(f"loss_mean: expected {r_mean:.6g}, got {mean:.6g}")
    return out


# --------------------------------------------------------------------------------------------- wrappers

def _inputs(x, target, grad, loss, lse, loss_mean):
    """Validate the arrays of one call; return N, V. grad may be x itself (in place)."""
    expect("x", x, dtype=np.uint16, ndim=2, align=2)
    N, V = (int(s) for s in x.shape)
    if V < 1:
        raise KernelInputError(f"x has shape {tuple(x.shape)}: the vocabulary (its second dimension) must be at "
                               "least 1")
    if N >= 2 ** 31 or V >= 2 ** 31:
        raise KernelInputError(f"x has shape {tuple(x.shape)}: rows and columns must each be below 2^31")
    align = 16 if V % 8 == 0 else 2
    expect("x", x, dtype=np.uint16, shape=(N, V), align=align)
    expect("grad", grad, dtype=np.uint16, shape=(N, V), align=align)
    expect("target", target, dtype=np.int32, shape=(N,), align=4)
    expect("loss", loss, dtype=np.float32, shape=(N,), align=4)
    expect("lse", lse, dtype=np.float32, shape=(N,), align=4)
    expect("loss_mean", loss_mean, dtype=np.float32, shape=(1,), align=4)
    if grad.data.ptr != x.data.ptr and _overlap(x, grad):
        raise KernelInputError("grad overlaps x without being x: pass grad=x (in place) or a separate array")
    return N, V


def _overlap(a, b) -> bool:
    a0, b0 = a.data.ptr, b.data.ptr
    return a0 < b0 + b.nbytes and b0 < a0 + a.nbytes


def check_targets(target, V: int, ignore_index: int = IGNORE_INDEX) -> int:
    """The number of rows not ignored; KernelInputError naming the first target outside [0, V)."""
    import cupy as cp
    bad = (target != ignore_index) & ((target < 0) | (target >= V))
    if bool(bad.any()):
        i = int(cp.flatnonzero(bad)[0])
        raise KernelInputError(f"target[{i}] = {int(target[i])}: each target must be in [0, {V}) or "
                               f"ignore_index ({ignore_index})")
    return int(cp.count_nonzero(target != ignore_index))


def fused_build(V: int, sms: int, l2_bytes: int) -> tuple[int, int, tuple[str, ...]]:
    """The fused kernel's default (THREADS, blocks per SM, -D options) for rows of V logits, from the sweeps
    of builds and grids on the H200 (labs/results/logs/2026-12-01/cross-entropy-*.log). While two blocks'
    rows in flight (2 x SMs x V x 2 bytes) take at most half the L2: two blocks of 512 threads per SM, the
    plain build (77% of copy at 32,000 logits a row). Past that, one block of 1,024 per SM whose first read
    asks the L2 to keep the row and whose gradient streams through (HINTS), with two batches of loads in
    flight (PREFETCH=2): at 128,256 the plain build's second reads missed the L2 for 0.6 of the row (1.67 GB
    read from DRAM against 1.05), the hinted build's hit (1.10 GB), 67% -> 75% of copy."""
    if 2 * sms * V * 2 <= l2_bytes // 2:
        return 512, 2, ()
    return 1024, 1, ("-DPREFETCH=2", "-DHINTS=1")


def launcher(x, target, grad, loss, lse, loss_mean, *, version: str = BEST, scale: float | None = None,
             ignore_index: int = IGNORE_INDEX, threads: int | None = None, blocks: int | None = None,
             defines: tuple[str, ...] = ()):
    """A zero-argument function running one forward and backward (loss_mean zeroed first), arguments checked
    once. scale None: 1 / rows not ignored (targets checked on the GPU, one synchronisation here). threads: a
    build with that block size (-DTHREADS); blocks: the fused kernel's grid. Neither given: the fused kernel
    takes fused_build's choice for this row length and GPU. defines: more -D options of the build (sweeps;
    given alone, the file's plain THREADS and one block per SM)."""
    import cupy as cp
    if version not in VERSIONS:
        raise KernelInputError(f"version {version!r}: one of {', '.join(VERSIONS)}")
    N, V = _inputs(x, target, grad, loss, lse, loss_mean)
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    if version == "fused" and threads is None and blocks is None and not defines:
        threads, per_sm, defines = fused_build(V, sms, dev.attributes["L2CacheSize"])
        blocks = per_sm * sms
    if scale is None:
        n = check_targets(target, V, ignore_index)
        scale = 1.0 / n if n else 0.0
    opts = tuple(defines) + (() if threads is None else (f"-DTHREADS={int(threads)}",))
    path = VERSIONS[version].path
    cfg = launch_config(path, opts)
    f32, i32 = np.float32(scale), np.int32(ignore_index)
    if version == "two_pass":
        lse_k, grad_k = kernel(path, "ce_lse", opts), kernel(path, "ce_grad", opts)
        units = V // 8 if V % 8 == 0 else V
        gx = max(1, -(-units // (cfg[1] * cfg[2])))

        def run():
            loss_mean.fill(0)
            if N == 0:
                return
            lse_k((N,), (cfg[0],), (x, target, loss, lse, loss_mean, np.int32(V), f32, i32))
            for r0 in range(0, N, 65535):
                grad_k((gx, min(65535, N - r0)), (cfg[1],),
                       (x, target, lse, grad, np.int32(V), f32, i32, np.int32(r0)))
        return run
    fused = kernel(path, "ce_fused", opts)
    grid = max(1, min(N, blocks or sms * cfg[1]))

    def run():
        loss_mean.fill(0)
        if N:
            fused((grid,), (cfg[0],), (x, target, grad, loss, lse, loss_mean, np.int32(N), np.int32(V), f32, i32))
    return run


def cross_entropy(x, target, grad, loss, lse, loss_mean, **kw) -> None:
    """One forward and backward: loss, lse (N,), loss_mean (1,) and grad (N, V, may be x) written."""
    launcher(x, target, grad, loss, lse, loss_mean, **kw)()


# ------------------------------------------------------------------------------------------------ checks

def random_logits(N: int, V: int, seed: int, scale: float = 3.0):
    """bf16 logits (bit patterns) of standard deviation `scale` on the GPU."""
    import cupy as cp
    rng = cp.random.default_rng(seed)
    return bf16.to_bits(rng.standard_normal((N, V), dtype=cp.float32) * scale)


def random_targets(N: int, V: int, ignored: int, seed: int):
    """int32 targets in [0, V): row 0 targets class 0, row 1 class V - 1, and `ignored` rows spread evenly
    over rows 2 .. N - 1 hold IGNORE_INDEX."""
    rs = np.random.default_rng(seed)
    t = rs.integers(0, V, N).astype(np.int32)
    t[:1] = 0
    t[1:2] = V - 1
    if ignored:
        if N - 2 < ignored:
            raise ValueError(f"{ignored} ignored rows need N >= {ignored + 2}, got N = {N}")
        t[np.linspace(2, N - 1, ignored).round().astype(int)] = IGNORE_INDEX
    return t


def check_case(version: str, N: int, V: int, ignored: int, seed: int, *, in_place: bool = False, **kw) -> list[str]:
    """Run one case into poisoned, canary-padded outputs; what is wrong against the fp64 reference."""
    import cupy as cp
    x = random_logits(N, V, seed)
    if N and V > 2:                                   # extremes the online state must survive
        x[0, 1] = bf16.to_bits(cp.asarray([3.0e38], dtype=cp.float32))[0]     # near the bf16 maximum
        x[N - 1, 2] = np.uint16(0xFF80)                                     # -inf: exp = 0
    t_host = random_targets(N, V, ignored, seed)
    ref = reference(x.get(), t_host)
    outs = {name: GuardedOutput(shape, dtype) for name, shape, dtype in
            (("loss", (N,), "float32"), ("lse", (N,), "float32"), ("loss_mean", (1,), "float32"))}
    if in_place:
        g = GuardedOutput((N, V), "bfloat16")
        g.array[...] = x
        grad_arr, x_arr = g.array, g.array
    else:
        g = GuardedOutput((N, V), "bfloat16")
        grad_arr, x_arr = g.array, x
    cross_entropy(x_arr, cp.asarray(t_host), grad_arr, outs["loss"].array, outs["lse"].array,
                  outs["loss_mean"].array, version=version, **kw)
    cp.cuda.Device().synchronize()
    problems = [f"{name}: {p}" for name, o in (("grad", g), *outs.items()) for p in o.problems()]
    if problems:
        return problems
    return mismatches(outs["loss"].values(), outs["lse"].values(), g.values(), float(outs["loss_mean"].values()[0]),
                      ref)


def check_all(ctx, versions=tuple(VERSIONS)) -> None:
    """Every version on every case (out of place and in place), the fused kernel also on a grid of one block
    (every row through one block: the per-row state and barrier reused) and of 3."""
    for v in versions:
        for i, (N, V, ign) in enumerate(CHECK_CASES):
            runs = [dict(), dict(in_place=True)] + ([dict(blocks=1), dict(blocks=3)] if v == "fused" else [])
            for kw in runs:
                problems = check_case(v, N, V, ign, 1000 + i, **kw)
                label = f"cross_entropy {v} N={N} V={V} ignored={ign}" + "".join(f" {k}={w}" for k, w in kw.items())
                if problems:
                    raise CheckFailed(f"{label}: " + "; ".join(problems))
                ctx.log.append(f"ok  {label}")


# ------------------------------------------------------------------------------------------------ timing

def torch_eager(x_bits, target):
    """PyTorch's forward and backward as a training step runs them: F.cross_entropy (mean) on bf16 logits
    that require a gradient, then torch.autograd.grad (a fresh gradient tensor each call)."""
    import torch
    import torch.nn.functional as F
    xt = bf16.as_torch(x_bits).detach().requires_grad_(True)
    tt = torch.as_tensor(target, device="cuda").long()

    def run():
        loss = F.cross_entropy(xt, tt)
        torch.autograd.grad(loss, xt)
    return run


def torch_compiled(x_bits, target):
    """The same step with F.cross_entropy under torch.compile (AOTAutograd compiles its backward too)."""
    import torch
    import torch.nn.functional as F
    xt = bf16.as_torch(x_bits).detach().requires_grad_(True)
    tt = torch.as_tensor(target, device="cuda").long()
    f = torch.compile(lambda a, b: F.cross_entropy(a, b))

    def run():
        torch.autograd.grad(f(xt, tt), xt)
    return run


def ce_bytes(N: int, V: int) -> int:
    """The floor of a kernel that writes the gradient: the logits read once and the gradient written once,
    plus targets in and the per-row outputs (the mean's 4 bytes are not counted)."""
    return 2 * 2 * N * V + 4 * N + 8 * N


def ce_flops(N: int, V: int) -> int:
    """About 4 floating-point operations per logit and pass (subtract, scale, exp, add or subtract)."""
    return 8 * N * V


def benchmarks(ctx):
    """Per shape: the irregular checks first (once), then both versions timed in alternation with PyTorch
    eager and torch.compile (bench_interleaved), each output of the timed inputs checked on two rows."""
    import cupy as cp
    check_all(ctx)
    try:
        import torch  # noqa: F401
        torch_ok = True
    except ImportError:
        torch_ok = False
        ctx.log.append("torch not installed: cross_entropy recorded without the PyTorch baselines")
    for N, V in (QUICK_SHAPES if ctx.quick else SHAPES):
        x = random_logits(N, V, 7 * N + V)
        t_host = random_targets(N, V, N // 64, N + V)
        t = cp.asarray(t_host)
        n = check_targets(t, V)
        grad = cp.empty_like(x)
        loss, lse, mean = (cp.empty(N, cp.float32), cp.empty(N, cp.float32), cp.empty(1, cp.float32))
        fns = {v: launcher(x, t, grad, loss, lse, mean, version=v, scale=1.0 / n) for v in VERSIONS}
        rows = [0, 1]                                  # never ignored (random_targets)
        ref = reference(x[rows].get(), t_host[rows])
        for v, fn in fns.items():
            fn()
            cp.cuda.Device().synchronize()
            # the timed inputs, checked on two rows (the mean over all rows is not what a two-row reference
            # gives, and the gradient's scale is the whole batch's)
            got = (loss[rows].get().astype(np.float64), lse[rows].get().astype(np.float64),
                   bf16.from_bits(grad[rows].get()).astype(np.float64) * (n / len(rows)))
            problems = mismatches(*got, None, ref)
            if problems:
                raise CheckFailed(f"cross_entropy {v} {N}x{V} (timed inputs): " + "; ".join(problems))
            ctx.log.append(f"ok  cross_entropy {v} {N}x{V} (timed inputs)")
        base = {"eager": torch_eager(x, t_host), "compiled": torch_compiled(x, t_host)} if torch_ok else {}
        for b in base.values():
            b()                                        # compile and warm outside the timed loop
        ts = bench_interleaved({**fns, **base}, max_reps=30)
        shape = [N, V]
        common = dict(chapter="10", op=OP, shape=shape, dtype="bfloat16", bytes=ce_bytes(N, V),
                      flops=ce_flops(N, V), ceiling="copy")
        if base:
            yield ctx.record(kernel="torch_eager", timing=ts["eager"], **common)
            yield ctx.record(kernel="torch_compile", timing=ts["compiled"], baseline=BASELINE,
                             baseline_timing=ts["eager"], **common)
        for v in VERSIONS:
            yield ctx.record(kernel=v, timing=ts[v], baseline=BASELINE if base else None,
                             baseline_timing=ts.get("eager"), **common)
        del x, grad, base, fns
        cp.get_default_memory_pool().free_all_blocks()

