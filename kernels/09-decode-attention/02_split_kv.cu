// Chapter 09, rung 2: split-KV (FlashDecoding): the context of each (sequence, KV head) spread over
// NSPLIT blocks, and a merge of their partial softmax states.
//
// Idea: rung 1 gives batch 1 only Hkv = 4 blocks for 132 SMs. A softmax over keys split into chunks is
// exact once the chunks' states are merged: split s of the keys yields (o_s = its normalised output,
// lse_s = its log-sum-exp), and softmax over all keys = sum_s e^(lse_s - M) o_s / sum_s e^(lse_s - M),
// lse = M + ln sum_s e^(lse_s - M), M = max_s lse_s (chapter 04's merge of two states, n-ary). The split
// kernel is rung 1's block on keys [k0, k1) of its split (chunks of ceil(len / nsplit) keys rounded up
// to 64, so short sequences leave their last splits empty: lse = -inf, weight 0), writing fp32 o / l
// and lse to a workspace; decode_merge (one block per (sequence, query head), one thread per dim)
// combines them. nsplit is a runtime argument; with nsplit = 1 the split kernel writes the bf16 output
// and the LSE itself and no merge runs. The workspace costs B Hq nsplit (D + 1) 4 bytes written and read
// again: 1 MB at batch 1 with 64 splits, 1.6% of the 67 MB of KV.
// Macros: HEAD_DIM (64, 128), GROUP (1..8), WARPS (4), UNROLL (keys per slot and step: 4, 2 at G > 4).
// contract: q out bf16 (B,Hq,D), K V bf16 (B,Hkv,Smax,D) contiguous, seq_lens int32 (B) in [0,Smax],
//           lse fp32 (B,Hq) natural log, ws_o fp32 (B,Hq,nsplit,D), ws_lse fp32 (B,Hq,nsplit),
//           Hq = GROUP*Hkv, scale 1/sqrt(D), 1 <= nsplit <= 1024, all 16-byte aligned
// Launch: decode_split grid (nsplit, Hkv, B), block 32 * WARPS, no dynamic shared memory; then, if
// nsplit > 1, decode_merge grid (B * Hq), block HEAD_DIM. launch_config() writes the geometry.
//
// Prediction (H200: 4.19 TB/s copy, 132 SMs, 60 MB L2; Hq=32, Hkv=4, G=8, d=128, 32k context):
// batch 1 with nsplit = 64: 256 blocks of 512 keys (256 KB of K/V each), ~2 per SM: the same ~2.6 TB/s
// latency bound and 30-45% SIMT math bound as rung 1 at batch 64, now at batch 1 too: 25-40% of copy
// (the merge and its launch add ~2-3 us to ~45 us), ~25x rung 1. Batch 64: as rung 1 (30-45%), nsplit
// 2-4 evening out the 1.94 waves of 256 blocks. G=1: 50-65% (loads in flight).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "decode_attention"):
//   split_kv at 1x32x4x32768x128x0: 0.0527 ms, 1274 GB/s, 36.0% of copy, 0.53x SDPA contiguous
//   split_kv at 64x32x4x32768x128x0: 2.3169 ms, 1854 GB/s, 43.5% of copy, 0.40x SDPA contiguous
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
#define SPLIT_ALIGN 64                       // split chunks: multiples of 64 keys

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(GROUP >= 1 && GROUP <= 8, "GROUP: 1..8");
static_assert(NSUB * GROUP * (HEAD_DIM + 2) * 4 <= 48 * 1024, "static shared memory: 48 KB");

#include "common/decode_attn.cuh"   // dec_load_q, dec_simt_step, dec_finish

extern "C" __global__ void __launch_bounds__(NTHREADS)
decode_split(const bf16_t* __restrict__ q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
             const int* __restrict__ seq_lens, bf16_t* __restrict__ out, float* __restrict__ lse,
             float* __restrict__ ws_o, float* __restrict__ ws_lse, int Hkv, int Smax, int nsplit)
{
    __shared__ float sm_m[NSUB * GROUP], sm_l[NSUB * GROUP];
    __shared__ __align__(16) float sm_o[NSUB * GROUP * HEAD_DIM];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sub = lane % LPK, slot_w = lane / LPK, slot = warp * KPW + slot_w;
    const int split = blockIdx.x, hkv = blockIdx.y, b = blockIdx.z;
    int k0, k1;
    dec_split_range<SPLIT_ALIGN>(seq_lens[b], nsplit, split, k0, k1);
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
    for (int kw = k0 + warp * KPW * UNROLL; kw < k1; kw += STEP) {
        uint4 kr[UNROLL], vr[UNROLL];
        bool ok[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int key = kw + slot_w * UNROLL + u;
            ok[u] = key < k1;
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
    dec_finish<GROUP, HEAD_DIM, NSUB, NTHREADS>(sm_m, sm_l, sm_o, tid, row0, nsplit, split, out, lse,
                                                ws_o, ws_lse);
}

// The merge of the nsplit partial states of (sequence, query head) = blockIdx.x into out and lse.
extern "C" __global__ void __launch_bounds__(HEAD_DIM)
decode_merge(const float* __restrict__ ws_o, const float* __restrict__ ws_lse, bf16_t* __restrict__ out,
             float* __restrict__ lse, int nsplit)
{
    dec_merge_body<HEAD_DIM>(ws_o, ws_lse, out, lse, nsplit);
}

// The launch configuration of this build: out[0..9] = threads per block, dynamic shared memory bytes,
// HEAD_DIM, GROUP, keys per block step, K/V stages (0: loads to registers), warps, splits (0: runtime),
// merge threads, paged (0). Grids: (nsplit, Hkv, B) and (B * Hq).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = NTHREADS;
    out[1] = 0;
    out[2] = HEAD_DIM;
    out[3] = GROUP;
    out[4] = STEP;
    out[5] = 0;
    out[6] = WARPS;
    out[7] = 0;
    out[8] = HEAD_DIM;
    out[9] = 0;
}
