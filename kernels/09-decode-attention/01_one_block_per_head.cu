// Chapter 09, rung 1: decode attention, one block per (sequence, KV head), the GQA group in the block.
//
// Idea: at decode time each sequence brings ONE new query token per head, so attention is a
// matrix-vector product against the whole KV cache: 2 FLOPs per K or V element read, far below any
// ridge point; the KV bytes are the cost. In grouped-query attention G = Hq / Hkv query heads read the
// same KV head, so one block takes the whole group: every K/V row comes from memory once and is used G
// times (a kernel per query head would read the cache G times). Thread map: 16 lanes share one K/V
// row at d=128 (8 at d=64), each with one 16-byte load of 8 dims; lane sub keeps the 8-dim slice of q
// for all G heads and of the output accumulators. The G partial dots of a row are summed over the
// row's lanes by xor shuffles; each slot of lanes keeps its own online-softmax state (m, l per head,
// o) over the keys it visits (U consecutive keys per step, all loads issued before the math), and the
// block merges its slots through shared memory at the end (common/decode_attn.cuh).
// Macros: HEAD_DIM (64, 128), GROUP (1..8), WARPS (4), UNROLL (keys per slot and step: 4, 2 at G > 4).
// contract: q out bf16 (B,Hq,D), K V bf16 (B,Hkv,Smax,D) contiguous, seq_lens int32 (B) in [0,Smax],
//           lse fp32 (B,Hq) natural log, Hq = GROUP*Hkv, scale 1/sqrt(D), all 16-byte aligned
// Launch: grid (Hkv, B), block 32 * WARPS, no dynamic shared memory (static: the slot states, 32 KB
// at G=8); launch_config() writes the geometry.
//
// Prediction (H200: 4.19 TB/s copy ceiling, 132 SMs, 60 MB L2; Hq=32, Hkv=4, G=8, d=128, 32k context):
// KV 67 MB per sequence. Batch 1: 4 blocks on 4 of 132 SMs, each with 2 x UNROLL 16-byte loads per
// thread in flight (8 KB per block) against ~0.8 us of latency: ~10 GB/s per block, ~40-80 GB/s in all
// (1-2% of copy, ~1 ms). Batch 64 (4.3 GB): 256 blocks, 2 per SM (~210 registers), 16 KB in flight per
// SM (~20 GB/s each at that latency, ~2.6 TB/s), and at G=8 the SIMT math is the roof: per key 2 x 8 x
// 128 FMAs + 16 shuffles per 16 lanes, ~90 warp instructions against ~29 issue cycles per key per SM at
// full bandwidth: 30-45% of copy (1.3-1.9 TB/s); G=1 is bound by the loads in flight only (~60%).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "decode_attention"):
//   one_block at 1x32x4x32768x128x0: 1.9526 ms, 34 GB/s, 1.0% of copy, 0.01x SDPA contiguous
//   one_block at 64x32x4x32768x128x0: 2.3140 ms, 1857 GB/s, 43.6% of copy, 0.40x SDPA contiguous
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef GROUP
#define GROUP 8
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef UNROLL
#define UNROLL (GROUP <= 4 ? 4 : 2)
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif

#define NTHREADS (32 * WARPS)
#define LPK (HEAD_DIM / 8)                   // lanes per K/V row
#define KPW (32 / LPK)                       // key slots per warp
#define NSUB (WARPS * KPW)                   // key slots per block
#define STEP (NSUB * UNROLL)                 // keys per block step

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(GROUP >= 1 && GROUP <= 8, "GROUP: 1..8");
static_assert(NSUB * GROUP * (HEAD_DIM + 2) * 4 <= 48 * 1024, "static shared memory: 48 KB");

#include "common/decode_attn.cuh"   // dec_load_q, dec_simt_step, dec_finish

extern "C" __global__ void __launch_bounds__(NTHREADS)
decode_one_block(const bf16_t* __restrict__ q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
                 const int* __restrict__ seq_lens, bf16_t* __restrict__ out, float* __restrict__ lse,
                 int Hkv, int Smax)
{
    __shared__ float sm_m[NSUB * GROUP], sm_l[NSUB * GROUP];
    __shared__ __align__(16) float sm_o[NSUB * GROUP * HEAD_DIM];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sub = lane % LPK, slot_w = lane / LPK, slot = warp * KPW + slot_w;
    const int hkv = blockIdx.x, b = blockIdx.y, len = seq_lens[b];
    const size_t row0 = ((size_t)b * Hkv + hkv) * GROUP;             // b * Hq + hkv * G
    const size_t kvh = ((size_t)b * Hkv + hkv) * Smax * HEAD_DIM + sub * 8;

    float qr[GROUP][8], o[GROUP][8], m[GROUP], l[GROUP];
    dec_load_q<GROUP, HEAD_DIM>(qr, q + row0 * HEAD_DIM, sub, SM_SCALE * LOG2E);
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        m[g] = NEG_INF;
        l[g] = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[g][j] = 0.f;
    }
    // Keys kw + slot_w * UNROLL + u of warp-uniform steps kw: the whole warp runs every step.
    for (int kw = warp * KPW * UNROLL; kw < len; kw += STEP) {
        uint4 kr[UNROLL], vr[UNROLL];
        bool ok[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int key = kw + slot_w * UNROLL + u;
            ok[u] = key < len;
            const size_t at = kvh + (size_t)(ok[u] ? key : 0) * HEAD_DIM;
            kr[u] = *reinterpret_cast<const uint4*>(K + at);
            vr[u] = *reinterpret_cast<const uint4*>(V + at);
        }
        dec_simt_step<GROUP, HEAD_DIM, UNROLL>(o, m, l, qr, kr, vr, ok);
    }
    // The slots' states to shared memory, then one merge for the block.
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        float* d = sm_o + (slot * GROUP + g) * HEAD_DIM + sub * 8;
        *reinterpret_cast<float4*>(d) = make_float4(o[g][0], o[g][1], o[g][2], o[g][3]);
        *reinterpret_cast<float4*>(d + 4) = make_float4(o[g][4], o[g][5], o[g][6], o[g][7]);
        if (sub == 0) {
            sm_m[slot * GROUP + g] = m[g];
            sm_l[slot * GROUP + g] = l[g];
        }
    }
    __syncthreads();
    dec_finish<GROUP, HEAD_DIM, NSUB, NTHREADS>(sm_m, sm_l, sm_o, tid, row0, 1, 0, out, lse, nullptr,
                                                nullptr);
}

// The launch configuration of this build: out[0..9] = threads per block, dynamic shared memory bytes,
// HEAD_DIM, GROUP, keys per block step, K/V stages (0: loads to registers), warps, splits (1), merge
// threads (0: no merge), paged (0). Grid: (Hkv, B).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = NTHREADS;
    out[1] = 0;
    out[2] = HEAD_DIM;
    out[3] = GROUP;
    out[4] = STEP;
    out[5] = 0;
    out[6] = WARPS;
    out[7] = 1;
    out[8] = 0;
    out[9] = 0;
}
