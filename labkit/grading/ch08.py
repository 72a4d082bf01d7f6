"""Chapter 08 exercises: the numbers of FlashAttention (FLOPs, bytes fused and naive, intensity, a K/V tile's
shared memory, the merge of two online-softmax states), one tile of query rows of one head against all keys
with the online softmax, and a full FlashAttention-2-style forward kernel timed against PyTorch's SDPA flash
back end in the same grade.

Both kernel tasks write two outputs, O (bf16) and LSE (fp32, the natural log-sum-exp of each row's scaled
scores), each in its own poisoned, canary-fenced buffer (`KernelTask.outputs`), and are checked by
`labkit.chapters.ch08`'s own reference and tolerance (`verify`): the fp32 O, LSE and sd = sqrt(P^2 V^2) from
the exact bf16 inputs, computed before the launch; O within 2^-8 |ref| + 2^-6 (rms(ref) + sd) element by
element (the bf16 rounding of O and of P before P V), LSE within 1e-3 + 2^-12 |ref|. A NaN anywhere is wrong.

Inputs: Q, K, V random normal bf16 (uint16 bit patterns). The "large" cases plant one key of huge scores: every
element of K[j] is 128, so its scaled score is 128 sum(q) / sqrt(d), about 128 N(0, 1): up to several hundred,
where exp overflows fp32 (e^88.7) unless the row max is subtracted first, and where the row max jumps when
that key's tile arrives (a kernel that forgets to rescale O then, or l, is far off). The key's position is
drawn from the case's seed. 08.flash_fwd plants it in the last head of every batch of every checked case (not
the speed case, where SDPA runs on the same inputs).

Causal: query i sees keys j <= i, so row 0 sees one key, and a row's first key tile may be entirely masked
(a kernel that walks the tiles from the last one, or past the diagonal, meets rows whose scores are all -inf
so far: exp(-inf - (-inf)) is NaN unless guarded). S is any length >= 1; S = 1 and S off every tile size are
among the shapes.

08.attention_tile: one head, d = 64, Q/K/V/O (S, 64), LSE (S); one warp per 16 query rows (grid ceil(S / 16)),
on CUDA cores or mma.sync, the learner's choice. Correctness only.
08.flash_fwd: (B, H, S, 128), one block of 4 warps per 64 query rows of one (batch, head), 80 KB of dynamic
shared memory (two stages of a 64-key K and V tile beside the Q tile, if the kernel wants them). Timed at
SPEED_SHAPE against torch.nn.functional.scaled_dot_product_attention with the flash back end on the same
inputs (labkit.chapters.ch08.sdpa); without torch, the speed is "not measured" and says why.
"""
from __future__ import annotations

import importlib.util
import math

import numpy as np

from .tasks import BaselineUnavailable, KernelTask, NumericTask, Question, primes_between

# The speed bar of 08.flash_fwd, % of SDPA's flash back end (FLOP rate) measured in the same grade at
# SPEED_SHAPE. An ESTIMATE, not a measurement: MUST BE SET FROM THE H200 MEASUREMENT of the reference solution
# (the notebook's flash_fwd_src: grade it, read its "% of SDPA flash"), at about 0.75 x that figure (a margin
# for run-to-run spread and a busy GPU), and the notebook's markdown with it (a CPU test checks they agree).
# Estimate: on the H200 (labs/results/logs/2026-12-01/flash-attention-sweep-2.log, SDPA flash 363.7 TFLOP/s
# at 16 x 16 x 4096 x 128 non-causal) the ladder's 03_exp2.cu (exp2 folding, one K/V buffer, 4 warps) ran at
# 0.82x and 05_pipelined.cu in the 64 x 64, 4-warp, 2-stage configuration the reference here uses at 0.90x;
# the reference rescales O at every tile (no RESCALE_TAU) and stores O straight from the accumulators (no
# staged 16-byte epilogue): predicted ~80-85%, so a bar of 60%.
FLASH_SPEED_PCT = 60.0
SPEED_SHAPE = (16, 16, 4096, 128)          # B, H, S, d; non-causal (the speed case has no variant)

TILE_D, TILE_ROWS = 64, 16                 # 08.attention_tile: d = 64, one warp per 16 query rows
FLASH_D, FLASH_BM, FLASH_BN, FLASH_STAGES, FLASH_THREADS = 128, 64, 64, 2, 128
FLASH_SMEM = (FLASH_BM + 2 * FLASH_STAGES * FLASH_BN) * FLASH_D * 2          # 81920 bytes
PLANT = 128.0                              # every element of the planted key (a bf16 value, exact)

# the numbers of 08.numbers
NB, NH, NS, ND = 16, 16, 4096, 128
_FLOPS = 4 * NB * NH * NS * NS * ND
_FUSED = 4 * NB * NH * NS * ND * 2                   # Q, K, V read and O written once, bf16
_NAIVE = _FUSED + 4 * NB * NH * NS * NS * 2          # + S written and read, P written and read, bf16
M1, L1, M2, L2 = 2.0, 3.0, 5.0, 1.0                  # two partial states of one row

numbers = NumericTask(
    id="08.numbers",
    title="The numbers of attention: FLOPs, bytes fused and naive, intensity, a K/V tile, merging two "
          "online-softmax states (B = 16, H = 16, S = 4096, d = 128, bf16)",
    answers_var="flash_answers",
    questions=[
        Question("flops", "FLOPs of the forward pass, non-causal (Q K^T and P V; 2 per multiply-add)", _FLOPS,
                 "two products of B H S^2 d multiply-adds each: 4 B H S^2 d", rtol=0.005),
        Question("flops_causal", "the same, causal (the convention: half of it)", _FLOPS // 2,
                 "the non-causal count halved (the diagonal's half tile is ignored)", rtol=0.005),
        Question("fused_bytes", "bytes of DRAM traffic of the fused kernel: Q, K, V read and O written once, bf16 "
                 "(leave out the LSE)", _FUSED, "four (B, H, S, d) tensors of 2 bytes per element", rtol=0.005),
        Question("naive_bytes", "bytes of the naive path: the fused traffic plus the S x S scores written and read "
                 "back by softmax and P written and read back by P V, all bf16", _NAIVE,
                 "add four passes over B H S^2 elements of 2 bytes: S written, S read, P written, P read",
                 rtol=0.005),
        Question("fused_intensity", "arithmetic intensity of the fused kernel (non-causal FLOPs / fused bytes)",
                 _FLOPS / _FUSED, "4 B H S^2 d / (8 B H S d): S / 2", rtol=0.01),
        Question("naive_intensity", "arithmetic intensity of the naive path (non-causal FLOPs / naive bytes)",
                 _FLOPS / _NAIVE, "the same FLOPs over the naive bytes: about d / 2, no longer growing with S",
                 rtol=0.01),
        Question("kv_tile_bytes", "shared memory in bytes of one K tile and one V tile of BLOCK_N = 64 keys, "
                 "d = 128, bf16 (no padding)", 2 * 64 * 128 * 2, "two 64 x 128 tiles of 2 bytes per element",
                 rtol=0),
        Question("merged_m", f"two partial states of one row, (m1, l1) = ({M1:g}, {L1:g}) and (m2, l2) = "
                 f"({M2:g}, {L2:g}), l the sum of exp(s - m) over its keys: the merged row max m", max(M1, M2),
                 "the larger of the two maxima", rtol=0),
        Question("merged_l", "their merged sum l, relative to the merged m", L1 * math.exp(M1 - max(M1, M2))
                 + L2 * math.exp(M2 - max(M1, M2)),
                 "each l rescaled to the new max: l1 e^(m1 - m) + l2 e^(m2 - m)", rtol=0.002),
        Question("o1_factor", "the factor the unnormalised output o1 of the first state is multiplied by in the "
                 "merge (o = a1 o1 + a2 o2)", math.exp(M1 - max(M1, M2)),
                 "the same rescale as l1's: e^(m1 - m)", rtol=0.002),
    ])


# ----------------------------------------------------------------------------------- shared pieces

def _causal(case) -> bool:
    return bool(case.variant) and "causal" in case.variant


def _large(case) -> bool:
    return bool(case.variant) and "large" in case.variant


def _dims(shape):
    """(B, H, S, d) of a case's shape: (S, d) for the one-head tile, (B, H, S, d) for the full kernel."""
    return (1, 1, *shape) if len(shape) == 2 else tuple(shape)


def _plant(K, case, heads) -> None:
    """Row j of K (every element PLANT) in the given heads of every batch; j drawn from the case's seed."""
    import cupy as cp
    from ..measure import bf16
    B, H, S, d = K.shape
    j = case.seed % S
    bits = bf16.to_bits(cp.full((d,), PLANT, dtype=cp.float32))
    for h in heads:
        K[:, h, j, :] = bits


def _inputs(case, gen):
    B, H, S, d = _dims(case.shape)
    Q, K, V = (gen.normal(tuple(case.shape), "bf16") for _ in range(3))
    K4 = K.reshape(B, H, S, d)
    if _large(case):
        _plant(K4, case, range(H))
    elif len(case.shape) == 4 and case.role != "speed":      # 08.flash_fwd: the last head of every batch
        _plant(K4, case, [H - 1])
    return {"Q": (Q, "bf16"), "K": (K, "bf16"), "V": (V, "bf16")}


def _verify(ins, case):
    """The chapter's reference (fp32 O, LSE, sd from the exact bf16 inputs, on the GPU), computed now, and the
    check of the kernel's outputs against it with the chapter's tolerance."""
    import cupy as cp
    from ..chapters import ch08
    from ..measure import bf16
    B, H, S, d = _dims(case.shape)
    q, k, v = (ins[n][0].reshape(B, H, S, d) for n in "QKV")
    ref_o, ref_lse, sd = ch08.reference(q, k, v, _causal(case))
    o_shape, l_shape = tuple(case.shape), tuple(case.shape)[:-1]
    ref_o, ref_lse, sd = ref_o.reshape(o_shape), ref_lse.reshape(l_shape), sd.reshape(o_shape)

    def check(outs):
        if not isinstance(outs, dict):          # the baseline's O alone
            outs = {"O": outs}
        got_o = bf16.from_bits(outs["O"]).astype(cp.float32)
        got_l = outs["LSE"].astype(cp.float32) if "LSE" in outs else ref_lse
        problems = ch08.mismatches(got_o, got_l, ref_o, ref_lse, sd)
        del got_o
        return "; ".join(problems) or None
    return check


def _outputs(shape):
    return (("O", tuple(shape), "bfloat16"), ("LSE", tuple(shape)[:-1], "float32"))


def _flops(s):
    B, H, S, d = _dims(s)
    return 4 * B * H * S * S * d


def _bytes(s):
    B, H, S, d = _dims(s)
    return 4 * B * H * S * d * 2 + B * H * S * 4


def _ref_bytes(s):
    """GPU bytes of the reference (Q, K, V decoded to fp32, O and sd, a chunk of scores with its exp, square and
    mask: at most 2^28 elements or one head) and of the check (O decoded, differences, tolerances, masks)."""
    B, H, S, d = _dims(s)
    n = B * H * S * d
    chunk = max(1 << 28, S * S)
    return 12 * n + 8 * n + 16 * chunk + S * S + 24 * n + (64 << 20)


def _variants(shape):
    return [None, "causal", "large", "causal_large"]


_VARIANT_TEXT = {"causal": "causal", "large": "a key of huge scores", "causal_large": "causal, a key of huge scores"}
_SIG = ('extern "C" __global__ void {name}(const unsigned short* Q, const unsigned short* K, const unsigned short* V, '
        'unsigned short* O, float* LSE, int S, int causal)')

_COMMON = dict(inputs=_inputs, reference=None, verify=_verify, outputs=_outputs, out_dtype="bfloat16",
               out_shape=lambda s: tuple(s), bytes_moved=_bytes, flops=_flops, ref_bytes=_ref_bytes,
               floor_peaks=("bf16_tflops",), variant_text=_VARIANT_TEXT)


# ------------------------------------------------------------------- one tile of query rows, one head

def _tile_launch(k, ins, out, case, ctx):
    import cupy as cp
    S = case.shape[0]
    k((-(-S // TILE_ROWS),), (32,), (ins["Q"], ins["K"], ins["V"], out["O"], out["LSE"], cp.int32(S),
                                     cp.int32(1 if _causal(case) else 0)))


def _tile_hidden(rng):
    """Fixed: two keys, one whole tile of rows, one row more than a multiple of 16 and 64, a long sequence
    (4099 = 64 x 64 + 3); drawn: a prime length (every tile size's tail)."""
    return [(2, TILE_D), (64, TILE_D), (65, TILE_D), (4099, TILE_D), (primes_between(rng, 100, 3000), TILE_D)]


attention_tile = KernelTask(
    id="08.attention_tile",
    title="One warp, 16 query rows of one head against all keys: fused attention with the online softmax (d = 64)",
    kernel="attention_tile",
    signature=_SIG.format(name="attention_tile"),
    source_var="attention_tile_src",
    shapes=[(1, TILE_D), (16, TILE_D), (17, TILE_D), (100, TILE_D), (257, TILE_D), (1000, TILE_D)],
    launch=_tile_launch,
    launch_text="grid = ceil(S / 16) blocks of 32 threads (one warp), no dynamic shared memory: block x computes "
                "query rows 16x..16x+15 (those below S) against all S keys. Contract: one head, d = 64, Q, K, V, "
                "O (S, 64) bf16 row-major, LSE (S) fp32, S >= 1, scale 1/sqrt(64) = 0.125, causal: row i sees "
                "keys j <= i",
    variants=_variants,
    points_correct=3, points_hidden=1, points_speed=0,
    hidden_shapes=_tile_hidden,
    **_COMMON,
)


# ---------------------------------------------------------------------------- the full forward kernel

def _flash_launch(k, ins, out, case, ctx):
    import cupy as cp
    B, H, S, d = case.shape
    if getattr(k, "max_dynamic_shared_size_bytes", None) != FLASH_SMEM:
        k.max_dynamic_shared_size_bytes = FLASH_SMEM
    k((-(-S // FLASH_BM), B * H), (FLASH_THREADS,),
      (ins["Q"], ins["K"], ins["V"], out["O"], out["LSE"], cp.int32(S), cp.int32(1 if _causal(case) else 0)),
      shared_mem=FLASH_SMEM)


_sdpa_runs: dict = {}


def sdpa_baseline(ins, out, case):
    """O = SDPA(Q, K, V) with PyTorch's flash back end on the case's inputs (labkit.chapters.ch08.sdpa, set up
    once per set of arrays: the timed call is the library's alone). BaselineUnavailable without torch, or
    when the back end refuses the inputs on this GPU."""
    if importlib.util.find_spec("torch") is None:
        raise BaselineUnavailable("the baseline, PyTorch's SDPA flash back end, needs torch (pip install torch)")
    key = (ins["Q"].data.ptr, ins["K"].data.ptr, ins["V"].data.ptr, out.data.ptr, tuple(case.shape), _causal(case))
    run = _sdpa_runs.get(key)
    if run is None:
        from ..chapters import ch08
        B, H, S, d = case.shape
        q, k, v = (ins[n].reshape(B, H, S, d) for n in "QKV")
        run = ch08.sdpa("sdpa_flash", q, k, v, out.reshape(B, H, S, d), _causal(case))
        if run is None:
            raise BaselineUnavailable("the baseline, PyTorch's SDPA flash back end, refuses these inputs on this "
                                      "GPU (it needs sm_80 or newer)")
        _sdpa_runs.clear()
        _sdpa_runs[key] = run
        return                          # ch08.sdpa ran it once already
    run()


def _flash_hidden(rng):
    """Fixed: one query, a 64-row tile and one row more, many heads of a short sequence, a long one (8193 keys:
    128 tiles and one key); drawn: a prime length."""
    return [(1, 2, 1, FLASH_D), (1, 1, 65, FLASH_D), (8, 16, 129, FLASH_D), (1, 2, 8193, FLASH_D),
            (2, 3, primes_between(rng, 100, 3000), FLASH_D)]


flash_fwd = KernelTask(
    id="08.flash_fwd",
    title="FlashAttention forward on Tensor Cores: (B, H, S, 128) bf16, 64-row query tiles, causal or not",
    kernel="flash_fwd",
    signature=_SIG.format(name="flash_fwd"),
    source_var="flash_fwd_src",
    shapes=[(1, 1, 1, FLASH_D), (1, 2, 17, FLASH_D), (2, 3, 200, FLASH_D), (1, 4, 1000, FLASH_D),
            (4, 8, 1024, FLASH_D), (1, 2, 4097, FLASH_D)],
    launch=_flash_launch,
    launch_text=f"grid = (ceil(S / 64), B * H), block = 128 threads (4 warps), dynamic shared memory {FLASH_SMEM} "
                "bytes (the grader raises the kernel's limit): block (x, y) computes query rows 64x..64x+63 (those "
                "below S) of head y = b H + h. Contract: Q, K, V, O (B, H, S, 128) bf16 contiguous, LSE (B, H, S) "
                "fp32, S >= 1, scale 1/sqrt(128), causal: row i sees keys j <= i",
    variants=lambda s: [None, "causal"],
    speed_shape=SPEED_SHAPE, speed_threshold=FLASH_SPEED_PCT,
    speed_baseline=sdpa_baseline, baseline_name="SDPA flash",
    points_correct=3, points_hidden=1, points_speed=2,
    hidden_shapes=_flash_hidden,
    **_COMMON,
)

TASKS = (numbers, attention_tile, flash_fwd)
