// Chapter 09, rung 4: paged split-KV decode with the GQA group as the M dimension of mma.sync.
//
// Idea: rung 3 streams the cache but at G=8 its SIMT math is the roof: per key 2 G D FMAs plus the
// shuffles that sum each dot product across 16 lanes, ~3x what the bandwidth leaves per key. Stack the
// G query rows of the group (zero rows up to 16) as the A operand of mma.sync m16n8k16: per warp and
// 16 keys, S = Q K^T is 2 x D/16 mma.sync and O += P V is D/8 more, i.e. 2 mma per key whatever G is
// (up to 16), ~3 tensor cycles per key per SM against the ~29 the bandwidth leaves. Chapter 08's pieces
// do the rest (common/flash_mma.cuh): K and V tiles swizzled in shared memory, Q fragments in
// registers, the accumulators of S become the A operand of P V, row max / sum over the 4 lanes of a
// quad. Each of the WARPS warps takes WKEYS keys of every BK = WARPS x WKEYS stage of the paged ring
// (rung 3's cp.async ring with the block-table lookups a stage ahead), with its own online-softmax
// state; the block merges the warps' states, then the splits are merged as in rung 2. Rows G..15 of
// the tile are computed on zeros and dropped.
// Macros: HEAD_DIM (64, 128), GROUP (1..8), WARPS (8), WKEYS (16 keys per warp per stage), STAGES (3).
// contract: q out bf16 (B,Hq,D), K V bf16 pages (num_pages,Hkv,P,D), block_table int32 (B,max_pages),
//           seq_lens int32 (B) <= max_pages*P, P = 1 << pshift (16..256), lse fp32 (B,Hq) natural log,
//           ws_o fp32 (B,Hq,nsplit,D), ws_lse fp32 (B,Hq,nsplit), nsplit in [1,1024], Hq = GROUP*Hkv,
//           scale 1/sqrt(D)
// Launch: decode_paged_mma grid (nsplit, Hkv, B), block 32 * WARPS, dynamic shared memory
// (16 + STAGES x 2 x BK) x D x 2 bytes (196 KB at the defaults and d=128: raise the attribute); then,
// if nsplit > 1, decode_merge grid (B * Hq), block HEAD_DIM. launch_config() writes the geometry.
//
// Prediction (H200: 4.19 TB/s copy, 132 SMs, 60 MB L2; Hq=32, Hkv=4, G=8, d=128, 32k context, P=16):
// the math is now ~10% of the time per key, so the bytes in flight decide: 1 block per SM at 132 KB,
// 3 stages of 32 KB = 96 KB in flight per SM, above the ~48 KB that 4.19 TB/s x ~1.5 us of loaded
// latency needs across 132 SMs. Batch 64 (4.3 GB, ~1.1 ms at copy speed), nsplit 2-4 for 512-1024 even
// blocks: 85-92% of copy (3.6-3.9 TB/s). Batch 1 (67 MB, a copy of that size runs ~3.3-3.6 TB/s), nsplit
// 32-64 (128-256 blocks of 512-1024 keys): each block pays one latency to fill its ring and the merge
// adds ~2-3 us to ~20 us: 80-90% of the same-size copy. Against SDPA over gathered pages (the gather
// alone reads and writes the KV once more): >= 3x. G=1: the same bandwidth (the MMA wastes 15 rows).
// The defaults are the best build of the H200 sweep (labs/results/logs/2026-12-01/decode-attention-*):
// the prediction above is for WARPS=4 STAGES=4; WARPS=8 STAGES=3 keeps 2 stages of 64 KB in flight, 128 KB.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "decode_attention"):
//   paged_mma at 1x32x4x32768x128x16: 0.0291 ms, 2306 GB/s, 65.2% of copy, 5.46x SDPA over gathered pages
//   paged_mma at 64x32x4x32768x128x16: 0.9537 ms, 4505 GB/s, 105.7% of copy, 9.35x SDPA over gathered pages
//   paged_mma at 1x32x4x32768x128x64: 0.0277 ms, 2425 GB/s, 68.6% of copy, 5.71x SDPA over gathered pages
//   paged_mma at 64x32x4x32768x128x64: 0.9451 ms, 4546 GB/s, 106.7% of copy, 9.44x SDPA over gathered pages
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef GROUP
#define GROUP 8
#endif
#ifndef WARPS
#define WARPS 8
#endif
#ifndef WKEYS
#define WKEYS 16
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif
#define SWIZZLE 1                            // ldmatrix of 8 rows at one chunk: 8 bank groups

#define SL (SM_SCALE * LOG2E)                // scores -> log2 units
#define NTHREADS (32 * WARPS)
#define BK (WARPS * WKEYS)                   // keys per stage
#define SPLIT_ALIGN 64
#define Q_BYTES (16 * HEAD_DIM * 2)
#define SMEM_BYTES (Q_BYTES + STAGES * 2 * BK * HEAD_DIM * 2)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(GROUP >= 1 && GROUP <= 8, "GROUP: 1..8 (rows g of the m16 tile; g + 8 unused)");
static_assert(WKEYS % 16 == 0, "WKEYS: a multiple of 16");
static_assert(WARPS * GROUP * (HEAD_DIM + 2) * 4 <= SMEM_BYTES - Q_BYTES, 
              "the warps' states fit in the ring");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

#include "common/smem_addr.cuh"      // smem_u32
#include "common/flash_mma.cuh"      // fa_load_tile, fa_load_q
#include "common/decode_attn.cuh"    // dec_split_range, dec_finish, dec_merge_body
#include "common/decode_paged.cuh"   // dec_paged_ring, dec_mma_keys, dec_mma_states

extern "C" __global__ void __launch_bounds__(NTHREADS)
decode_paged_mma(const bf16_t* __restrict__ q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
                 const int* __restrict__ block_table, const int* __restrict__ seq_lens,
                 bf16_t* __restrict__ out, float* __restrict__ lse, float* __restrict__ ws_o,
                 float* __restrict__ ws_lse, int Hkv, int pshift, int max_pages, int nsplit)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, t = lane & 3;
    const int split = blockIdx.x, hkv = blockIdx.y, b = blockIdx.z;
    int k0, k1;
    dec_split_range<SPLIT_ALIGN>(seq_lens[b], nsplit, split, k0, k1);
    const size_t row0 = ((size_t)b * Hkv + hkv) * GROUP;             // b * Hq + hkv * G
    const size_t pe = ((size_t)HEAD_DIM) << pshift;                  // elements of one head's page rows
    const unsigned sQ = smem_u32(smem), sRing = sQ + Q_BYTES;

    // Q: rows 0..G-1 of the m16 tile, the rest zero-filled; its own commit group ahead of the ring's.
    fa_load_tile<16, HEAD_DIM, HEAD_DIM, NTHREADS>(sQ, q + row0 * HEAD_DIM, 0, GROUP, tid);
    cp_async_commit();

    unsigned qf[HEAD_DIM / 16][4];
    float o[HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[n][i] = 0.f;
    float m_run = NEG_INF, l = 0.f;          // row g = lane / 4 (log2 units; l: this lane's partial sum)

    dec_paged_ring<BK, HEAD_DIM, HEAD_DIM, NTHREADS, STAGES>(
        sRing, K, V, block_table + (size_t)b * max_pages, k0, k1, pe * Hkv, pe * hkv, pshift, tid,
        [&] {                                                      // Q landed while the ring fills
            cp_async_wait<STAGES - 1>();
            __syncthreads();
            fa_load_q<HEAD_DIM, HEAD_DIM>(qf, sQ, 0, lane);
        },
        [&](unsigned sK, unsigned sV, int kb) {
            const int n0 = kb + warp * WKEYS;                          // this warp's first key
            if (n0 >= k1) return;                                   // warp-uniform
            const unsigned off = warp * WKEYS * HEAD_DIM * 2;       // WKEYS % 8 == 0: swizzle intact
            dec_mma_keys<HEAD_DIM, WKEYS>(o, m_run, l, qf, sK + off, sV + off, n0, k1, SL, lane);
        });
    // The ring is drained: its memory takes the warps' states, rows g < G of each warp.
    float* sm_m = reinterpret_cast<float*>(smem + Q_BYTES);
    float* sm_l = sm_m + WARPS * GROUP;
    float* sm_o = sm_l + WARPS * GROUP;
    dec_mma_states<GROUP, HEAD_DIM, WARPS>(sm_m, sm_l, sm_o, o, m_run, l, warp, lane, t);
    __syncthreads();
    dec_finish<GROUP, HEAD_DIM, WARPS, NTHREADS>(sm_m, sm_l, sm_o, tid, row0, nsplit, split, out, lse, ws_o,
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
