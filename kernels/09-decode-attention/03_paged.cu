// Chapter 09, rung 3: split-KV over a paged KV cache (PagedAttention), rows prefetched by a cp.async ring.
//
// Idea: a serving engine does not keep each sequence's cache contiguous: it hands out fixed pages of P
// keys from a pool as sequences grow, and a block table per sequence lists its pages in order
// (common/decode_paged.cuh: pages (num_pages, Hkv, P, D), one KV head's P rows of a page contiguous).
// Every key now costs an extra dependent load (its page id) before its row can be fetched; done
// naively that is a second memory latency per row. Here the rows go through a ring of STAGES
// shared-memory stages of BK keys: the cp.asyncs of stage j + STAGES - 1 are issued while stage j is
// computed, and the page ids of stage j + STAGES are loaded right after, so they are in registers by
// the time that stage's copies are issued: the indirection is always a stage ahead, never in front of
// a copy. The bytes in flight no longer cost registers (rung 2: 2 x UNROLL x 16 bytes per thread;
// here (STAGES - 1) x 32 KB per block at the defaults). The math is rung 2's SIMT step reading its
// 16-byte slices from shared memory; splits and the merge are rung 2's.
// Macros: HEAD_DIM (64, 128), GROUP (1..8), WARPS (4), UNROLL (2), BK (64 keys per stage), STAGES (3).
// contract: q out bf16 (B,Hq,D), K V bf16 pages (num_pages,Hkv,P,D), block_table int32 (B,max_pages),
//           seq_lens int32 (B) <= max_pages*P, P = 1 << pshift (16..256), lse fp32 (B,Hq) natural log,
//           ws_o fp32 (B,Hq,nsplit,D), ws_lse fp32 (B,Hq,nsplit), nsplit in [1,1024], Hq = GROUP*Hkv,
//           scale 1/sqrt(D)
// Launch: decode_paged grid (nsplit, Hkv, B), block 32 * WARPS, dynamic shared memory STAGES x 2 x BK
// x D x 2 bytes (96 KB at the defaults, d=128: raise the attribute); then, if nsplit > 1, decode_merge
// grid (B * Hq), block HEAD_DIM. launch_config() writes the geometry.
//
// Prediction (H200: 4.19 TB/s copy, 132 SMs, 60 MB L2; Hq=32, Hkv=4, G=8, d=128, 32k context, P=16):
// 2 blocks per SM (96 KB each), 4 stages = 128 KB in flight per SM: ample for the bandwidth at ~1.5 us
// of loaded latency, so at G=1 70-85% of copy at batch 64 and, with 64 splits, at batch 1. At G=8 the
// SIMT math of rung 2 stays the roof (~90 warp instructions per key, ~29 cycles per key per SM at full
// bandwidth, now plus 2 shared loads per key per lane): 30-45% of copy, like rung 2 at batch 64 but
// no longer latency-bound; the page size changes nothing above P = 16 (4 KB runs of a head's rows).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "decode_attention"):
//   paged at 1x32x4x32768x128x16: 0.0509 ms, 1318 GB/s, 37.3% of copy, 3.13x SDPA over gathered pages
//   paged at 64x32x4x32768x128x16: 2.2297 ms, 1927 GB/s, 45.2% of copy, 4.00x SDPA over gathered pages
//   paged at 1x32x4x32768x128x64: 0.0512 ms, 1311 GB/s, 37.1% of copy, 3.08x SDPA over gathered pages
//   paged at 64x32x4x32768x128x64: 2.2322 ms, 1925 GB/s, 45.2% of copy, 4.00x SDPA over gathered pages
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
#define UNROLL 2
#endif
#ifndef BK
#define BK 64
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif
#define SWIZZLE 0                            // plain rows: 16 lanes read one 256-byte row, no conflict

#define NTHREADS (32 * WARPS)
#define LPK (HEAD_DIM / 8)                   // lanes per K/V row
#define KPW (32 / LPK)                       // key slots per warp
#define NSUB (WARPS * KPW)                   // key slots per block
#define STEP (NSUB * UNROLL)                 // keys per block step within a stage
#define SPLIT_ALIGN 64
#define SMEM_BYTES (STAGES * 2 * BK * HEAD_DIM * 2)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(GROUP >= 1 && GROUP <= 8, "GROUP: 1..8");
static_assert(BK % STEP == 0, "BK: a multiple of the keys of one block step");
static_assert(NSUB * GROUP * (HEAD_DIM + 2) * 4 <= SMEM_BYTES, "the epilogue's states fit in the ring");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

#include "common/smem_addr.cuh"      // smem_u32
#include "common/decode_attn.cuh"    // dec_split_range, dec_load_q, dec_simt_step, dec_finish, ...
#include "common/decode_paged.cuh"   // dec_paged_ring

extern "C" __global__ void __launch_bounds__(NTHREADS)
decode_paged(const bf16_t* __restrict__ q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
             const int* __restrict__ block_table, const int* __restrict__ seq_lens, bf16_t* __restrict__ out,
             float* __restrict__ lse, float* __restrict__ ws_o, float* __restrict__ ws_lse, int Hkv,
             int pshift, int max_pages, int nsplit)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int sub = lane % LPK, slot_w = lane / LPK, slot = warp * KPW + slot_w;
    const int split = blockIdx.x, hkv = blockIdx.y, b = blockIdx.z;
    int k0, k1;
    dec_split_range<SPLIT_ALIGN>(seq_lens[b], nsplit, split, k0, k1);
    const size_t row0 = ((size_t)b * Hkv + hkv) * GROUP;             // b * Hq + hkv * G
    const size_t pe = ((size_t)HEAD_DIM) << pshift;                  // elements of one head's page rows

    float qr[GROUP][8], o[GROUP][8], m[GROUP], l[GROUP];
    dec_load_q<GROUP, HEAD_DIM>(qr, q + row0 * HEAD_DIM, sub, SM_SCALE * LOG2E);
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        m[g] = NEG_INF;
        l[g] = 0.f;
#pragma unroll
        for (int j = 0; j < 8; ++j) o[g][j] = 0.f;
    }
    const unsigned char* gen = smem;                // generic pointer and shared address of the ring
    const unsigned base = smem_u32(smem);
    dec_paged_ring<BK, HEAD_DIM, HEAD_DIM, NTHREADS, STAGES>(
        base, K, V, block_table + (size_t)b * max_pages, k0, k1, pe * Hkv, pe * hkv, pshift, tid, [] {},
        [&](unsigned sK, unsigned sV, int kb) {
            const unsigned char* gk = gen + (sK - base);
            const unsigned char* gv = gen + (sV - base);
#pragma unroll
            for (int kk = warp * KPW * UNROLL; kk < BK; kk += STEP) {
                if (kb + kk >= k1) break;                         // warp-uniform: past the split's end
                uint4 kr[UNROLL], vr[UNROLL];
                bool ok[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const int r = kk + slot_w * UNROLL + u;
                    ok[u] = kb + r < k1;
                    kr[u] = *reinterpret_cast<const uint4*>(gk + r * (HEAD_DIM * 2) + sub * 16);
                    vr[u] = *reinterpret_cast<const uint4*>(gv + r * (HEAD_DIM * 2) + sub * 16);
                }
                dec_simt_step<GROUP, HEAD_DIM, UNROLL>(o, m, l, qr, kr, vr, ok);
            }
        });
    // The ring is drained (and a barrier passed): its memory holds the slots' states now.
    float* sm_m = reinterpret_cast<float*>(smem);
    float* sm_l = sm_m + NSUB * GROUP;
    float* sm_o = sm_l + NSUB * GROUP;
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        float* d = sm_o + (slot * GROUP + g) * HEAD_DIM + sub * 8;
#pragma unroll
        for (int j = 0; j < 8; ++j) d[j] = o[g][j];
        if (sub == 0) {
            sm_m[slot * GROUP + g] = m[g];
            sm_l[slot * GROUP + g] = l[g];
        }
    }
    __syncthreads();
    dec_finish<GROUP, HEAD_DIM, NSUB, NTHREADS>(sm_m, sm_l, sm_o, tid, row0, nsplit, split, out, lse, ws_o,
                                                ws_lse);
}

// The merge of the nsplit partial states of (sequence, query head) = blockIdx.x into out and lse.
extern "C" __global__ void __launch_bounds__(HEAD_DIM)
decode_merge(const float* __restrict__ ws_o, const float* __restrict__ ws_lse, bf16_t* __restrict__ out,
             float* __restrict__ lse, int nsplit)
{
    dec_merge_body<HEAD_DIM>(ws_o, ws_lse, out, lse, nsplit);
}

// The launch configuration of this build: out[0..9] = threads per block, dynamic shared memory bytes,
// HEAD_DIM, GROUP, keys per stage, stages, warps, splits (0: runtime), merge threads, paged (1).
// Grids: (nsplit, Hkv, B) and (B * Hq).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = NTHREADS;
    out[1] = SMEM_BYTES;
    out[2] = HEAD_DIM;
    out[3] = GROUP;
    out[4] = BK;
    out[5] = STAGES;
    out[6] = WARPS;
    out[7] = 0;
    out[8] = HEAD_DIM;
    out[9] = 1;
}
