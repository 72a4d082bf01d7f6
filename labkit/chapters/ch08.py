"""Chapter 08: FlashAttention forward, a ladder from one fused CUDA-core kernel to a pipelined mma.sync kernel,
against PyTorch's scaled_dot_product_attention back ends (flash, cuDNN, memory-efficient) and naive PyTorch.

O = softmax(Q K^T / sqrt(d)) V per (batch, head), with the log-sum-exp of each row's scaled scores (natural
log, fp32) as a second output. Q, K, V, O: contiguous bf16 (B, H, S, d) tensors (CuPy uint16 bit patterns);
LSE: float32 (B, H, S). Causal: query i attends keys j <= i. d is 64 or 128 (a compile-time HEAD_DIM); S is
any length >= 1 (K/V rows past S are zero-filled and masked). Every kernel file exports
`entry(Q, K, V, O, LSE, int S, int causal)` and `launch_config(int* out)` (its geometry).

Kernels (kernels/08-flash-attention/):
- 01_fused_simt.cu    one fused kernel per 32-query tile on CUDA cores, online softmax in fp32;
- 02_mma.cu           mma.sync m16n8k16, Q in registers, K/V tiles by cp.async, P reused as the A operand;
- 03_exp2.cu          exp2 with scale * log2(e) folded in, row sums reduced once, rare rescales;
- 04_causal_skip.cu   causal tiles above the diagonal skipped, only diagonal tiles masked;
- 05_pipelined.cu     a ring of K/V stages, one barrier per tile, O staged for 16-byte stores.
- 06_wide_warps.cu    32 query rows per warp: each K/V fragment feeds two m16 tiles, Q re-read per k-step;
- 07_wgmma.cu         Hopper (sm_90a) only: a TMA producer warpgroup, two wgmma consumer warpgroups of 64
                      query rows, softmax under the P V of the previous tile (FlashAttention-3's schedule).
                      It takes tensor maps of Q, K, V (launch_config's out[8] = 1), built here by `launcher`;
                      on other GPUs the checks and benchmarks skip it with a line in the log.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from ..errors import CheckFailed, KernelInputError
from ..measure import bf16
from ..measure.checks import GuardedOutput, expect
from ..measure.compile import kernel, load_module, opt_in_shared_memory
from ..measure.timing import bench, bench_interleaved, pooled

HEADLINE = {"attention_fwd": "16x16x4096x128x0"}        # B x H x S x d x causal
# the shapes: B=16, H=16, S=4096 at d=128 and d=64, causal and not; one long sequence at B=1
BENCH_SHAPES = ((16, 16, 4096, 128, 0), (16, 16, 4096, 128, 1), (16, 16, 4096, 64, 0), (16, 16, 4096, 64, 1),
                (1, 16, 16384, 128, 0))
QUICK_SHAPES = ((4, 16, 2048, 128, 0), (4, 16, 2048, 128, 1))
# S = 1, 17, 1000, 4097 (tails of every tile size), B*H small and large, both head dims, causal and not
CHECK_SHAPES = [(1, 1, 1, 128, 0), (1, 1, 1, 64, 1), (2, 3, 17, 128, 1), (1, 4, 1000, 128, 1),
                (1, 4, 1000, 64, 0), (1, 1, 4097, 128, 1), (1, 1, 4097, 64, 0), (8, 16, 129, 128, 0),
                (4, 32, 200, 64, 1)]
SLOW = ("fused_simt",)          # 0.04x SDPA: timed at the headline shapes only
O_REL, O_ABS = 2.0 ** -8, 2.0 ** -6


@dataclasses.dataclass(frozen=True)
class Rung:
    name: str
    path: str
    function: str
    macros: tuple = ()


RUNGS = (Rung("fused_simt", "08-flash-attention/01_fused_simt.cu", "flash_simt"),
         Rung("mma", "08-flash-attention/02_mma.cu", "flash_mma"),
         Rung("exp2", "08-flash-attention/03_exp2.cu", "flash_exp2"),
         Rung("causal_skip", "08-flash-attention/04_causal_skip.cu", "flash_causal_skip"),
         Rung("pipelined", "08-flash-attention/05_pipelined.cu", "flash_pipelined"),
         Rung("wide_warps", "08-flash-attention/06_wide_warps.cu", "flash_wide"),
         Rung("wgmma", "08-flash-attention/07_wgmma.cu", "flash_wgmma"))
BEST = "wide_warps"             # the fastest rung on every GPU with mma.sync; wgmma: Hopper only
HOPPER_ONLY = ("wgmma",)        # wgmma, TMA, setmaxnreg: compute capability 9.0 only (sm_90a builds)


def rungs() -> dict[str, Rung]:
    return {r.name: r for r in RUNGS}


def options(macros) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in sorted(dict(macros).items()))


@dataclasses.dataclass(frozen=True)
class Geometry:
    block_m: int
    block_n: int
    threads: int
    smem: int
    head_dim: int
    stages: int
    warps: int
    swizzle: int
    operands: int = 0       # 0: Q, K, V pointers; 1: tensor maps of Q, K, V (07_wgmma.cu)
    q_box: int = 0          # rows of the Q box and of the K/V box of those tensor maps (64 columns each)
    kv_box: int = 0

    def grid(self, B: int, H: int, S: int) -> tuple[int, int, int]:
        if B * H > 65535:
            raise KernelInputError(f"B x H = {B * H}: at most 65535 (the grid's y dimension)")
        return (-(-S // self.block_m), B * H, 1)


@functools.lru_cache(maxsize=None)
def geometry(path: str, macros: tuple) -> Geometry:
    import cupy as cp
    out = cp.zeros(16, dtype=cp.int32)      # 8 fields; 11 for a rung that takes tensor maps
    load_module(path, options(macros)).get_function("launch_config")((1,), (1,), (out,))
    return Geometry(*(int(x) for x in out.get()[:11]))


def is_hopper_only(rung: Rung) -> bool:
    return rung.name in HOPPER_ONLY or rung.path.endswith("07_wgmma.cu")


def runs_here(rung: Rung) -> bool:
    """False for a Hopper-only rung on any GPU but compute capability 9.0."""
    if not is_hopper_only(rung):
        return True
    from ..measure.device import gpu_info
    return gpu_info()["compute_capability"] == "9.0"


@functools.lru_cache(maxsize=None)
def _kernel(path: str, function: str, macros: tuple):
    return opt_in_shared_memory(kernel(path, function, options(macros)), geometry(path, macros).smem,
                                f"{path} with {dict(macros) or 'its defaults'}")


def build(rung: Rung, head_dim: int) -> Rung:
    """The rung compiled for one head dim (HEAD_DIM is a compile-time macro)."""
    return dataclasses.replace(rung, macros=tuple(sorted({**dict(rung.macros), "HEAD_DIM": head_dim}.items())))


def check_operands(Q, K, V, O, LSE) -> tuple[int, int, int, int]:
    expect("Q", Q, dtype=np.uint16, ndim=4, align=16)
    B, H, S, d = Q.shape
    if d not in (64, 128):
        raise KernelInputError(f"head dim d = {d}: the kernels are built for d = 64 or 128")
    for name, a in (("K", K), ("V", V), ("O", O)):
        expect(name, a, dtype=np.uint16, shape=(B, H, S, d), align=16)
    expect("LSE", LSE, dtype=np.float32, shape=(B, H, S), align=16)
    if S < 1:
        raise KernelInputError("S must be at least 1")
    if max(S * d, B * H) >= 2 ** 31:
        raise KernelInputError(f"S x d = {S * d} or B x H = {B * H} too large for the kernels' int indexing")
    return B, H, S, d


def launcher(Q, K, V, O, LSE, causal: bool, version: str = BEST, rung: Rung | None = None):
    """A zero-argument function launching one rung (arguments checked and packed once)."""
    if rung is None:
        if version not in rungs():
            raise KernelInputError(f"no attention version {version!r}: one of {', '.join(rungs())}")
        rung = rungs()[version]
    B, H, S, d = check_operands(Q, K, V, O, LSE)
    r = build(rung, d)
    if is_hopper_only(r):
        from .ch07 import require_hopper
        require_hopper()
    g = geometry(r.path, r.macros)
    k = _kernel(r.path, r.function, r.macros)
    grid, block = g.grid(B, H, S), (g.threads, 1, 1)
    if g.operands == 1:
        qkv = tensor_maps(Q, K, V, g)
        args = (*qkv, O, LSE, np.int32(S), np.int32(1 if causal else 0))
        keep = (Q, K, V)                        # the maps hold their addresses: keep the arrays alive
        return lambda: (k(grid, block, args, shared_mem=g.smem), keep)[0]
    args = (Q, K, V, O, LSE, np.int32(S), np.int32(1 if causal else 0))
    return lambda: k(grid, block, args, shared_mem=g.smem)


def tensor_maps(Q, K, V, g: Geometry):
    """TMA tensor maps of Q, K, V viewed as (B H S) x d bf16 arrays (128-byte swizzle, zero fill past the
    last row), with boxes of g.q_box rows (Q) and g.kv_box rows (K, V), 64 columns each. A box that starts
    in one head and runs past its S reads the next head's first rows: the kernel masks those keys to
    -inf (P = 0) and never stores those query rows, so they only cost bandwidth."""
    from ..measure.tensormap import tensor_map
    B, H, S, d = Q.shape
    if B * H * S >= 2 ** 31:
        raise KernelInputError(f"B x H x S = {B * H * S}: the tensor maps' row coordinates are 32-bit signed")
    return tuple(tensor_map(x.reshape(B * H * S, d), box) for x, box in ((Q, g.q_box), (K, g.kv_box), (V, g.kv_box)))


def attention(Q, K, V, O, LSE, causal: bool = False, version: str = BEST, rung: Rung | None = None) -> None:
    """O, LSE = attention(Q, K, V) with one rung of the ladder (bf16 in and out, fp32 inside)."""
    launcher(Q, K, V, O, LSE, causal, version, rung)()


# --------------------------------------------------------------------------------------------- checks

def flops(B, H, S, d, causal) -> int:
    """4 B H S^2 d (QK^T and PV, 2 FLOPs per multiply-add), halved for causal (the convention of the
    FlashAttention papers and of SDPA benchmarks; the diagonal's half tile is ignored)."""
    f = 4 * B * H * S * S * d
    return f // 2 if causal else f


def fused_bytes(B, H, S, d) -> int:
    """Q, K, V read and O written once (bf16), LSE written (fp32): what a fused kernel must move."""
    return 4 * B * H * S * d * 2 + B * H * S * 4


def naive_bytes(B, H, S, d) -> int:
    """The unfused path on top: the S x S scores written and read by softmax, P written and read (bf16)."""
    return fused_bytes(B, H, S, d) + 4 * B * H * S * S * 2


def random_qkv(B, H, S, d):
    import cupy as cp
    return tuple(bf16.to_bits(cp.random.standard_normal((B, H, S, d), dtype=cp.float32)) for _ in range(3))


def reference(Q, K, V, causal: bool):
    """float32 O, LSE and sd = sqrt(softmax^2 @ V^2) (the size of the error bf16 rounding of P puts into O)
    from the exact bf16 inputs, on the GPU, head by head in chunks (at most 1 GiB of scores)."""
    import cupy as cp
    B, H, S, d = Q.shape
    q, k, v = (bf16.from_bits(x).reshape(B * H, S, d) for x in (Q, K, V))
    o = cp.empty((B * H, S, d), dtype=cp.float32)
    lse = cp.empty((B * H, S), dtype=cp.float32)
    sd = cp.empty((B * H, S, d), dtype=cp.float32)
    scale = np.float32(1.0 / math.sqrt(d))
    per = max(1, (1 << 28) // (S * S))
    mask = cp.triu(cp.ones((S, S), dtype=cp.bool_), 1) if causal else None
    for i in range(0, B * H, per):
        j = min(B * H, i + per)
        s = cp.matmul(q[i:j], k[i:j].transpose(0, 2, 1)) * scale
        if causal:
            s[:, mask] = -cp.inf
        m = s.max(axis=-1, keepdims=True)
        p = cp.exp(s - m)
        den = p.sum(axis=-1, keepdims=True)
        lse[i:j] = (m + cp.log(den))[..., 0]
        p /= den
        o[i:j] = cp.matmul(p, v[i:j])
        sd[i:j] = cp.sqrt(cp.matmul(p * p, v[i:j] * v[i:j]))
        del s, p
    return o.reshape(B, H, S, d), lse.reshape(B, H, S), sd.reshape(B, H, S, d)


def check_rung(ctx, rung: Rung, B, H, S, d, causal, what: str | None = None) -> None:
    """Fresh random Q, K, V; poisoned, canary-padded O and LSE; O within 2^-8 |ref| + 2^-6 (rms(ref) + sd)
    (bf16 output rounding, and the rounding of P to bf16 before P V, element by element), LSE within
    1e-3 + 2^-12 |ref|."""
    import cupy as cp
    Q, K, V = random_qkv(B, H, S, d)
    O, L = GuardedOutput((B, H, S, d), "bfloat16"), GuardedOutput((B, H, S), "float32")
    attention(Q, K, V, O.array, L.array, bool(causal), rung=rung)
    ref_o, ref_lse, sd = reference(Q, K, V, bool(causal))
    label = what or f"attention {rung.name} B{B} H{H} S{S} d{d}{' causal' if causal else ''}"
    problems = O.problems() + [f"LSE: {p}" for p in L.problems()]
    if not problems:
        problems = mismatches(O.values(cp), L.values(cp), ref_o, ref_lse, sd)
    if problems:
        raise CheckFailed(f"{label}: " + "; ".join(problems))
    ctx.log.append(f"ok  {label}")
    del Q, K, V, O, L, ref_o, ref_lse, sd
    cp.get_default_memory_pool().free_all_blocks()


def mismatches(got_o, got_lse, ref_o, ref_lse, sd) -> list[str]:
    """The chapter's tolerance (check_rung's, and the graded exercises'), on CuPy arrays of any one shape for
    O (and its shape less the last axis for LSE): O within 2^-8 |ref| + 2^-6 (rms(ref) + sd), element by
    element, LSE within 1e-3 + 2^-12 |ref|; a NaN or an infinity where the reference is finite is wrong.
    Returns what is wrong, one text per output (deterministic: counts, first index, expected and got)."""
    import cupy as cp
    out = []
    rms = float(cp.sqrt(cp.mean(ref_o.astype(cp.float64) ** 2))) if ref_o.size else 0.0
    ok = cp.abs(got_o - ref_o) <= O_REL * cp.abs(ref_o) + O_ABS * (rms + sd)
    if not bool(ok.all()):
        bad = ~ok
        i = int(cp.argmax(bad.reshape(-1)))
        idx = np.unravel_index(i, ref_o.shape)
        out.append(f"O: {int(bad.sum())} of {bad.size} elements wrong; first at {list(map(int, idx))}: "
                   f"expected {float(ref_o[idx]):.6g}, got {float(got_o[idx]):.6g}")
    ok = cp.abs(got_lse - ref_lse) <= 1e-3 + 2.0 ** -12 * cp.abs(ref_lse)
    if not bool(ok.all()):
        bad = ~ok
        i = int(cp.argmax(bad.reshape(-1)))
        idx = np.unravel_index(i, ref_lse.shape)
        out.append(f"LSE: {int(bad.sum())} of {bad.size} rows wrong; first at {list(map(int, idx))}: expected "
                   f"{float(ref_lse[idx]):.6g}, got {float(got_lse[idx]):.6g}")
    return out


def check_all(ctx, names=None) -> None:
    for name, rung in rungs().items():
        if names is not None and name not in names:
            continue
        if not runs_here(rung):
            ctx.log.append(f"--  {name}: wgmma, TMA and setmaxnreg need compute capability 9.0 (Hopper): not checked")
            continue
        for shape in CHECK_SHAPES:
            check_rung(ctx, rung, *shape)


# ------------------------------------------------------------------------------------------ baselines

SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION"}


def _torch_views(Q, K, V, O):
    return tuple(bf16.as_torch(x) for x in (Q, K, V, O))


def sdpa(backend: str, Q, K, V, O, causal: bool):
    """A zero-argument function running torch's scaled_dot_product_attention with one back end into O, or
    None when the back end refuses these inputs on this GPU."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    q, k, v, o = _torch_views(Q, K, V, O)
    be = getattr(SDPBackend, SDPA_BACKENDS[backend])

    def run():
        with sdpa_kernel(be):
            o.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    try:
        run()
    except RuntimeError:
        return None
    return run


def naive_torch(Q, K, V, O, causal: bool):
    """softmax(Q K^T / sqrt(d)) V in three PyTorch ops (bf16 matmuls, the S x S scores in memory)."""
    import torch
    q, k, v, o = _torch_views(Q, K, V, O)
    d = q.shape[-1]
    S = q.shape[-2]
    mask = torch.ones(S, S, device=q.device, dtype=torch.bool).triu(1) if causal else None

    def run():
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
        if causal:
            s.masked_fill_(mask, float("-inf"))
        o.copy_(torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), v))
    return run


# ------------------------------------------------------------------------------------------ benchmarks

def shape_key(B, H, S, d, causal) -> str:
    return f"{B}x{H}x{S}x{d}x{int(causal)}"


def benchmarks(ctx):
    """Per shape: the SDPA back ends timed in alternation (one group), naive PyTorch, then each rung in
    alternation with SDPA flash (bench_interleaved: the clock drifts under sustained tensor load); the
    sdpa_flash record pools its runs from every pair."""
    import cupy as cp
    from .ch06 import have_torch
    torch_ok = have_torch(ctx)
    check_all(ctx)
    for B, H, S, d, causal in (QUICK_SHAPES if ctx.quick else BENCH_SHAPES):
        Q, K, V = random_qkv(B, H, S, d)
        O = cp.empty((B, H, S, d), dtype=cp.uint16)
        L = cp.empty((B, H, S), dtype=cp.float32)
        shape = (B, H, S, d, causal)
        runs = {}
        if torch_ok:
            for name in SDPA_BACKENDS:
                run = sdpa(name, Q, K, V, O, bool(causal))
                if run is None:
                    ctx.log.append(f"{name} refused B{B} H{H} S{S} d{d}: not recorded")
                else:
                    runs[name] = run
        group = bench_interleaved(runs, max_reps=30) if runs else {}
        flash = runs.get("sdpa_flash")
        flash_times = [group["sdpa_flash"]] if flash else []
        timed = []
        if flash and S * S * B * H <= 1 << 32:      # the S x S scores must fit: 8 GiB of bf16 at most
            ts = bench_interleaved({"naive": naive_torch(Q, K, V, O, bool(causal)), "flash": flash}, max_reps=20)
            timed.append(("naive_torch", ts["naive"], ts["flash"]))
            flash_times.append(ts["flash"])
        for name, rung in rungs().items():
            if name in SLOW and (B, H, S) != (16, 16, 4096):
                continue
            if not runs_here(rung):
                ctx.log.append(f"{name}: wgmma, TMA and setmaxnreg need compute capability 9.0 (Hopper): not timed")
                continue
            run = launcher(Q, K, V, O, L, bool(causal), rung=rung)
            if name in SLOW:                            # 0.04x SDPA: three runs, the baseline from the group
                timed.append((name, bench(run, reps=3, warmup_ms=1.0), group.get("sdpa_flash")))
                continue
            if flash:
                ts = bench_interleaved({"rung": run, "flash": flash}, max_reps=30)
                timed.append((name, ts["rung"], ts["flash"]))
                flash_times.append(ts["flash"])
            else:
                timed.append((name, bench(run, max_reps=30), None))
        for name in runs:
            yield _record(ctx, name, shape, pooled(flash_times) if name == "sdpa_flash" else group[name], None)
        for name, t, base in timed:
            yield _record(ctx, name, shape, t, base)
        del Q, K, V, O, L
        cp.get_default_memory_pool().free_all_blocks()


def _record(ctx, kernel_name, shape, t, base):
    B, H, S, d, causal = shape
    own = not kernel_name.startswith("sdpa_")
    return ctx.record(chapter="08", op="attention_fwd", kernel=kernel_name, shape=[B, H, S, d, int(causal)],
                      dtype="bfloat16", bytes=fused_bytes(B, H, S, d), flops=flops(B, H, S, d, causal), timing=t,
                      baseline="SDPA flash" if base is not None and own else None,
                      baseline_timing=base if own else None,
                      ceiling="wgmma" if kernel_name in HOPPER_ONLY else "mma")


# ----------------------------------------------------------------------------------------- the lab

def merge_states(m1, l1, o1, m2, l2, o2):
    """Two partial online-softmax states (row max m, sum l of exp(s - m), unnormalised output o) merged
    into one: the identity the fused kernels apply at every key tile and split-KV decoding applies across
    splits. NumPy or CuPy arrays; m may be -inf (no keys yet)."""
    xp = np if isinstance(m1, np.ndarray) or np.isscalar(m1) else __import__("cupy")
    m = xp.maximum(m1, m2)
    a1 = xp.where(xp.isneginf(m1), 0.0, xp.exp(m1 - xp.where(xp.isneginf(m), 0.0, m)))
    a2 = xp.where(xp.isneginf(m2), 0.0, xp.exp(m2 - xp.where(xp.isneginf(m), 0.0, m)))
    return m, a1 * l1 + a2 * l2, a1[..., None] * o1 + a2[..., None] * o2
