// Chapter 09, rung 5: rung 4 with the merge of the splits inside the split kernel and the block table
// in shared memory, for the fixed costs that decide batch 1.
//
// Idea: at batch 1 (4 KV heads, 32k keys, 67 MB) rung 4 streams at the rate it holds at batch 64 for
// only ~15 of its ~28 us; the rest is a chain of waits that a long stream hides and a short one does
// not. Three of them are attacked here. (a) The second launch: each split block writes its partial
// (o / l, lse) to the workspace as before, fences, and counts itself on an int per (sequence, KV head);
// the block that counts last has every other split's partial in L2 and merges the G query heads of its
// KV head itself (common/decode_paged.cuh: dec_merge_group), then puts the counter back to 0. No second
// grid, no gap between the grids, and the merge of one KV head starts when its own last split ends.
// The partials come through the drained ring (cp.async.cg, up to STAGES - 1 slots of BK / GROUP
// splits in flight, 8 at G = 8) while the weights are computed from one round of LSE loads.
// (b) The block table: the split's page ids go into a window of BT_PAGES ints of shared memory in one
// round of loads before the ring starts (their 128-byte lines prefetched into L2 while seq_lens[b] is
// still in flight), so the prologue's STAGES - 1 stages go out back to back and no copy waits on a
// table load. (c) Splits need not be a power of two: keys are cut in chunks of 16 (SPLIT_ALIGN), so 33
// splits x 4 KV heads = 132 blocks, one per SM (32 splits of 1008 keys and one of 512), where 64-key
// chunks would leave the 33rd split empty. The MMA key step, the ring and the epilogue are rung 4's.
// Macros: HEAD_DIM (64, 128), GROUP (1..8), WARPS (8), WKEYS (16 keys per warp per stage), STAGES (3),
// BT_PAGES (1024 ints of block table per window).
// contract: q out bf16 (B,Hq,D), K V bf16 pages (num_pages,Hkv,P,D), block_table int32 (B,max_pages),
//           seq_lens int32 (B) <= max_pages*P, P = 1 << pshift (16..256), lse fp32 (B,Hq) natural log,
//           ws_o fp32 (B,Hq,nsplit,D), ws_lse fp32 (B,Hq,nsplit), counters int32 (B,Hkv) zero at the
//           launch and zero again at its end (allocate them zeroed once, keep them with the workspace;
//           launches that share them must be stream-ordered), nsplit in [1,256], Hq = GROUP*Hkv,
//           scale 1/sqrt(D)
// Launch: decode_fused grid (nsplit, Hkv, B), block 32 * WARPS, dynamic shared memory (16 + STAGES x 2
// x BK) x D x 2 + 4 BT_PAGES bytes (200 KB at the defaults and d=128: raise the attribute), plus 8 KB
// static at G=8; nothing else (nsplit 1 writes out and lse directly, counters untouched).
// launch_config() writes the geometry.
//
// Prediction (H200: 132 SMs; rung 4 measured at batch 1, P=16, nsplit 32: 29.3 us at its defaults,
// 27.7 us at its best build; the copy of the 67 MB 33.1 us, 4051 GB/s; 85% of copy = 19.5 us). Rung 4's
// 29.3 us as: 15.2 us of stream (67 MB at the 4.4 TB/s it holds at batch 64) + ~2 us of launch and first
// bytes (what the copy pays too: 33.1 us against 31.1 us at its batch-64 rate) + ~2.4 us of dependent
// loads in front of the first rows (seq_lens, then the table, ~0.8 us each from DRAM after the L2
// flush, then the third prologue stage's table sector, ~0.8 us) + ~3.8 us of merge (the end of the grid
// and the second launch ~1 us, one round of LSE loads and 4 rounds of 8-deep loads of o at ~0.5 us each)
// + ~5 us of drain, epilogue and imbalance between 128 blocks. (a) puts in place of the 3.8 us a fence
// and an atomic (~2 x 0.5 us) and 128 KB of partials (8 heads x 32 splits x 128 x 4 B) into one SM at
// ~64 B/clk (2048 clk, 1.0 us, + 0.5 us of latency): ~2.5 us, -1.3 us. (b) keeps seq_lens' 0.8 us and
// one table round, an L2 hit after the hint (~0.3 us), of the 2.4 us: -1.3 us. (c) the slowest block
// reads 1008 keys, not 1024: -1.6% of the stream, 0-0.25 us. So ~26.5 us at the defaults (63% of copy)
// and ~25 us from rung 4's best build (67%): batch 1 stays short of 85%, the ~7 us of start, drain and
// imbalance are still there. Batch 64 (nsplit 1, no merge): rung 4's 98-102% of copy; the window costs
// one L2 round per 16384 keys. The defaults are rung 4's best build (WARPS=8 STAGES=3): ~25 us there.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "decode_attention"):
//   fused_merge at 1x32x4x32768x128x16: 0.0293 ms, 2289 GB/s, 64.7% of copy, 5.43x SDPA over gathered pages
//   fused_merge at 64x32x4x32768x128x16: 0.9601 ms, 4475 GB/s, 105.0% of copy, 9.29x SDPA over gathered pages
//   fused_merge at 1x32x4x32768x128x64: 0.0291 ms, 2305 GB/s, 65.2% of copy, 5.44x SDPA over gathered pages
//   fused_merge at 64x32x4x32768x128x64: 0.9531 ms, 4507 GB/s, 105.8% of copy, 9.36x SDPA over gathered pages
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
#ifndef BT_PAGES
#define BT_PAGES 1024
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif
#define SWIZZLE 1                            // ldmatrix of 8 rows at one chunk: 8 bank groups

#define SL (SM_SCALE * LOG2E)                // scores -> log2 units
#define NTHREADS (32 * WARPS)
#define BK (WARPS * WKEYS)                   // keys per stage
#define SPLIT_ALIGN 16                       // split chunks: multiples of 16 keys (one warp's step)
#define MERGE_MAX_SPLITS 256                 // the merge's weights: GROUP x 256 floats of static shared
#define Q_BYTES (16 * HEAD_DIM * 2)
#define STAGE_BYTES (2 * BK * HEAD_DIM * 2)  // one ring slot: K and V tiles, or BK / GROUP splits' partials
#define RING_BYTES (STAGES * STAGE_BYTES)
#define SMEM_BYTES (Q_BYTES + RING_BYTES + BT_PAGES * 4)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(GROUP >= 1 && GROUP <= 8, "GROUP: 1..8 (rows g of the m16 tile; g + 8 unused)");
static_assert(WKEYS % 16 == 0, "WKEYS: a multiple of 16");
static_assert(WARPS * GROUP * (HEAD_DIM + 2) * 4 <= RING_BYTES, "the warps' states fit in the ring");
static_assert(BK <= BT_PAGES, "a stage's pages fit the table window");
static_assert(SMEM_BYTES + GROUP * MERGE_MAX_SPLITS * 4 + 128 <= 227 * 1024,
              "shared memory: 227 KB per block at most");

#include "common/smem_addr.cuh"      // smem_u32
#include "common/flash_mma.cuh"      // fa_load_tile, fa_load_q
#include "common/decode_attn.cuh"    // dec_split_range, dec_finish, dec_last_arrival
#include "common/decode_paged.cuh"   // dec_bt_prefetch, dec_paged_ring_tab, dec_mma_keys, dec_mma_states,
                                     // dec_merge_group

extern "C" __global__ void __launch_bounds__(NTHREADS)
decode_fused(const bf16_t* __restrict__ q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
             const int* __restrict__ block_table, const int* __restrict__ seq_lens, bf16_t* __restrict__ out,
             float* __restrict__ lse, float* __restrict__ ws_o, float* __restrict__ ws_lse,
             int* __restrict__ counters, int Hkv, int pshift, int max_pages, int nsplit)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int last;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, t = lane & 3;
    const int split = blockIdx.x, hkv = blockIdx.y, b = blockIdx.z;
    const size_t row0 = ((size_t)b * Hkv + hkv) * GROUP;             // b * Hq + hkv * G
    const size_t pe = ((size_t)HEAD_DIM) << pshift;                  // elements of one head's page rows
    const unsigned sQ = smem_u32(smem), sRing = sQ + Q_BYTES;
    int* sBT = reinterpret_cast<int*>(smem + Q_BYTES + RING_BYTES);
    const int* bt = block_table + (size_t)b * max_pages;

    // Q and the table hint go out first: neither waits for seq_lens[b].
    fa_load_tile<16, HEAD_DIM, HEAD_DIM, NTHREADS>(sQ, q + row0 * HEAD_DIM, 0, GROUP, tid);
    cp_async_commit();
    dec_bt_prefetch<SPLIT_ALIGN, NTHREADS, BT_PAGES>(bt, max_pages, pshift, nsplit, split, tid);
    int k0, k1;
    dec_split_range<SPLIT_ALIGN>(seq_lens[b], nsplit, split, k0, k1);

    unsigned qf[HEAD_DIM / 16][4];
    float o[HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[n][i] = 0.f;
    float m_run = NEG_INF, l = 0.f;          // row g = lane / 4 (log2 units; l: this lane's partial sum)

    dec_paged_ring_tab<BK, HEAD_DIM, HEAD_DIM, NTHREADS, STAGES, BT_PAGES>(
        sRing, sBT, K, V, bt, k0, k1, pe * Hkv, pe * hkv, pshift, tid,
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
    // The ring is drained: its memory takes the warps' states, then (last block) the partials.
    float* sm_m = reinterpret_cast<float*>(smem + Q_BYTES);
    float* sm_l = sm_m + WARPS * GROUP;
    float* sm_o = sm_l + WARPS * GROUP;
    dec_mma_states<GROUP, HEAD_DIM, WARPS>(sm_m, sm_l, sm_o, o, m_run, l, warp, lane, t);
    __syncthreads();
    dec_finish<GROUP, HEAD_DIM, WARPS, NTHREADS>(sm_m, sm_l, sm_o, tid, row0, nsplit, split, out, lse, ws_o,
                                                 ws_lse);
    if (nsplit == 1) return;
    if (!dec_last_arrival(counters + (size_t)b * Hkv + hkv, nsplit, tid, &last)) return;
    dec_merge_group<GROUP, HEAD_DIM, NTHREADS, STAGES, STAGE_BYTES, MERGE_MAX_SPLITS>(
        ws_o, ws_lse, out, lse, row0, nsplit, sRing, smem + Q_BYTES, tid);
}

// The launch configuration of this build: out[0..11] = threads per block, dynamic shared memory bytes,
// HEAD_DIM, GROUP, keys per stage, stages, warps, splits (0: runtime), merge threads (0: no merge
// kernel), paged (1), the largest nsplit, the split alignment in keys. Grid: (nsplit, Hkv, B).
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
    out[8] = 0;
    out[9] = 1;
    out[10] = MERGE_MAX_SPLITS;
    out[11] = SPLIT_ALIGN;
}
