// Chapter 08, rung 5: a multi-stage K/V pipeline, bigger query tiles, a coalesced epilogue: the best rung.
//
// Idea: 02-04 load a key tile, wait for it, compute, and wait at a barrier before the next load: every
// tile pays the whole L2 -> shared latency (~1-2 us for 32 KB), hidden only by the other resident blocks.
// Here K and V tiles go through a ring of STAGES slots (chapter 06's multistage loop): the copies of
// tile j+STAGES-1 are issued right after the barrier that opens tile j and fly during the compute of
// STAGES-1 tiles; one barrier per tile both publishes tile j and frees the slot of tile j-1. Q has its
// own commit group ahead of the ring, so the first key tiles load while Q's fragments are taken.
// Defaults change with it: 8 warps (BLOCK_M = 128 query rows, 16 per warp, Q fragments in registers),
// so each K/V byte brought from L2 serves twice as many rows (half the L2 -> SM traffic of 02-04's
// 64-row tiles). The epilogue stages O through the (finished) Q tile, swizzled, and writes 16-byte
// chunks, full 128-byte lines. The tile body (exp2 folding, conditional rescale, causal tile skipping
// with per-warp skipping of tiles above a warp's diagonal, masks only where needed) is 04's.
// Macros: HEAD_DIM (64, 128), WARPS (8; BLOCK_M = 16 * WARPS), BLOCK_N (64), STAGES (2..6), SWIZZLE
// (1; 0: rows padded by 16 bytes), RESCALE_TAU (8).
// Shapes: Q, K, V, O contiguous bf16 (B, H, S, d), LSE fp32 (B, H, S); any S >= 1 (key rows past S are
// zero-filled and masked to -inf, query rows past S are computed on zeros and not stored).
// contract: Q K V O bf16 (B,H,S,HEAD_DIM) contiguous, LSE fp32 (B,H,S), 16-byte aligned, S >= 1,
//           scale 1/sqrt(HEAD_DIM), causal: query i sees keys j <= i
// Launch: grid (ceil(S / BLOCK_M), B * H) (causal: blockIdx.x = T - 1 - query tile, heaviest first),
// block 32 * WARPS threads, dynamic shared memory (BLOCK_M + 2 STAGES BLOCK_N) * HEAD_DIM * 2 bytes
// (96 KB at the defaults and d=128: raise the attribute); launch_config() writes the geometry.
//
// Prediction (B=16, H=16, S=4096, d=128; 2.2e12 FLOPs non-causal, 1.1e12 counted causal): DRAM
// 1.07 GB (0.26 ms) is far below the mma.sync roof's 3.5 ms; L2 -> SM 64 MB per query-tile row of
// blocks, 8.6 GB in all (~1.5 TB/s at 6 ms); shared memory 16 FLOP per ldmatrix byte (85% of the SM's
// 128 B/clk at the roof: the real limit with 16-row warps), plus ~2 FP32/MUFU instructions per score
// (a MUFU.EX2 per score is 1/4 of the mma time). Registers ~220-230 at d=128 (O 64, S 32, Q 32, K/V
// fragments): 1 block of 8 warps per SM, 2 warps per scheduler, 8192 blocks (32 query tiles x 256
// heads) = 62 waves. Expect 330-400 TFLOP/s non-causal (52-63% of the 636 TFLOP/s roof; 0.9-1.1x SDPA
// flash at 364), causal 290-370 (the diagonal tiles and the uneven blocks cost 5-10%); d=64: 250-330
// (twice the softmax work per FLOP).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "attention_fwd"):
//   pipelined at 16x16x4096x128x0: 6.9507 ms, 316.4 TFLOP/s, 49.7% of mma, 0.90x SDPA flash
//   pipelined at 16x16x4096x128x1: 3.7584 ms, 292.5 TFLOP/s, 45.9% of mma, 0.94x SDPA flash
//   pipelined at 16x16x4096x64x0: 4.1731 ms, 263.5 TFLOP/s, 41.4% of mma, 0.87x SDPA flash
//   pipelined at 16x16x4096x64x1: 2.3308 ms, 235.9 TFLOP/s, 37.0% of mma, 0.83x SDPA flash
//   pipelined at 1x16x16384x128x0: 6.9084 ms, 318.3 TFLOP/s, 50.0% of mma, 0.89x SDPA flash
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef WARPS
#define WARPS 8
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef SWIZZLE
#define SWIZZLE 1
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif

#ifndef RESCALE_TAU
#define RESCALE_TAU 8.0f               // rescale when a row max grows by more than this (log2 units)
#endif

#define SL (SM_SCALE * LOG2E)           // scores -> log2 units: exp(x * scale) = 2^(x * SL)
#define LN2 0.6931471805599453f
#define BLOCK_M (16 * WARPS)
#define NTHREADS (32 * WARPS)
#define ROW_LD (SWIZZLE ? HEAD_DIM : HEAD_DIM + 8)        // shared row pitch in elements
#define Q_BYTES (BLOCK_M * ROW_LD * 2)            // the Q tile; reused by the O tile of the epilogue
#define KV_BYTES (BLOCK_N * ROW_LD * 2)
#define STAGE_BYTES (2 * KV_BYTES)                 // one K tile and one V tile
#define SMEM_BYTES (Q_BYTES + STAGES * STAGE_BYTES)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(STAGES >= 2 && STAGES <= 6, "STAGES: 2..6");
static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16, "BLOCK_N: a multiple of 16");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

#include "common/smem_addr.cuh"   // smem_u32
#include "common/flash_mma.cuh"   // fa_load_tile, fa_load_q, fa_qk, fa_pv, fa_quad_*, fa_store

// One key tile for one warp: S = Q K^T, (MASK) the mask, the online-softmax update, O += P V.
template <bool CAUSAL, bool MASK>
__device__ __forceinline__ void attn_tile(float (&o)[HEAD_DIM / 8][4], float (&m_run)[2], float (&l)[2],
                                          const unsigned (&qf)[HEAD_DIM / 16][4], unsigned sK, unsigned sV,
                                          int n0, const int (&row)[2], int S, int lane)
{
    const int t = lane & 3;
    float s[BLOCK_N / 8][4];
    fa_qk<HEAD_DIM, ROW_LD, BLOCK_N>(s, qf, sK, lane);

    // MASK (diagonal or tail tiles only): key past S, or (causal) key after the query, to -inf.
    float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
    for (int n = 0; n < BLOCK_N / 8; ++n)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int key = n0 + n * 8 + 2 * t + (q & 1), h = q >> 1;
            if (MASK && (key >= S || (CAUSAL && key > row[h]))) s[n][q] = NEG_INF;
            mx[h] = fmaxf(mx[h], s[n][q]);
        }
    // The running max moves only when the tile's max exceeds it by more than RESCALE_TAU (in log2
    // units) in some row of the warp: then (warp-uniform branch) l and O are rescaled. Otherwise the
    // stale max stands and this tile's p may reach 2^RESCALE_TAU, harmless in fp32 and bf16.
    const float t0 = fa_quad_max(mx[0]) * SL, t1 = fa_quad_max(mx[1]) * SL;
    if (__any_sync(0xffffffffu, t0 > m_run[0] + RESCALE_TAU || t1 > m_run[1] + RESCALE_TAU)) {
        const float tm[2] = {t0, t1};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float m_new = fmaxf(m_run[h], tm[h]);
            const float alpha = fast_exp2(m_run[h] - (m_new == NEG_INF ? 0.f : m_new));
            m_run[h] = m_new;
            l[h] *= alpha;
#pragma unroll
            for (int n = 0; n < HEAD_DIM / 8; ++n) {
                o[n][2 * h] *= alpha;
                o[n][2 * h + 1] *= alpha;
            }
        }
    }
    // p = 2^(s * scale * log2 e - m): one FFMA and one MUFU.EX2 per score; the row sums stay
    // per-lane partial sums until the epilogue (no shuffles in the loop).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float neg_m = m_run[h] == NEG_INF ? 0.f : -m_run[h];   // all masked so far: p = 0
#pragma unroll
        for (int n = 0; n < BLOCK_N / 8; ++n)
#pragma unroll
            for (int q = 2 * h; q < 2 * h + 2; ++q) {
                s[n][q] = fast_exp2(fmaf(s[n][q], SL, neg_m));
                l[h] += s[n][q];
            }
    }

    fa_pv<HEAD_DIM, ROW_LD, BLOCK_N>(o, s, sV, lane);
}

template <bool CAUSAL>
__device__ __forceinline__ void attn_body(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K,
                                          const bf16_t* __restrict__ V, bf16_t* __restrict__ O,
                                          float* __restrict__ LSE, int S)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2;
    // Causal: the heaviest query tiles (most key tiles) first, so the short ones fill the tail.
    const int m0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BLOCK_M;
    const size_t head = (size_t)blockIdx.y * S * HEAD_DIM;
    Q += head; K += head; V += head; O += head;
    LSE += (size_t)blockIdx.y * S;
    const unsigned sQ = smem_u32(smem), sKV = sQ + Q_BYTES;  // slot i: K at sKV + i * STAGE_BYTES, then V
    const int n_end = CAUSAL ? min(S, m0 + BLOCK_M) : S;           // keys this block can see
    const int ntiles = (n_end + BLOCK_N - 1) / BLOCK_N;

    // Prologue: Q (one commit group), then key tiles 0 .. STAGES-2 (one group each, empty past the end).
    fa_load_tile<BLOCK_M, HEAD_DIM, ROW_LD, NTHREADS>(sQ, Q, m0, S, tid);
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        if (i < ntiles) {
            const unsigned st = sKV + i * STAGE_BYTES;
            fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(st, K, i * BLOCK_N, S, tid);
            fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(st + KV_BYTES, V, i * BLOCK_N, S, tid);
        }
        cp_async_commit();
    }
    cp_async_wait<STAGES - 1>();                                   // Q has landed (the tiles may not)
    __syncthreads();
    unsigned qf[HEAD_DIM / 16][4];
    fa_load_q<HEAD_DIM, ROW_LD>(qf, sQ, warp * 16, lane);

    float o[HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
        for (int q = 0; q < 4; ++q) o[n][q] = 0.f;
    float m_run[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};   // m in log2 units; l per lane
    const int w0 = m0 + warp * 16;                             // this warp's first query row
    const int row[2] = {w0 + g, w0 + g + 8};

    // Main loop. Tile j is read from slot j % STAGES. At the top of iteration j this thread waits until
    // at most STAGES-2 of its groups are pending (tile j has landed for it); the barrier makes tile j
    // visible to every thread AND tells that every warp has finished tile j-1, whose slot then takes
    // the copies of tile j+STAGES-1: they fly during this and the next STAGES-2 tiles' compute. One
    // barrier per tile.
    int rd = 0, wr = STAGES - 1;
    for (int j = 0; j < ntiles; ++j) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (j + STAGES - 1 < ntiles) {
            const unsigned st = sKV + wr * STAGE_BYTES;
            const int nn = (j + STAGES - 1) * BLOCK_N;
            fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(st, K, nn, S, tid);
            fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(st + KV_BYTES, V, nn, S, tid);
        }
        cp_async_commit();
        const unsigned sK = sKV + rd * STAGE_BYTES, sV = sK + KV_BYTES;
        rd = rd == STAGES - 1 ? 0 : rd + 1;
        wr = wr == STAGES - 1 ? 0 : wr + 1;

        // Tiles entirely above this warp's diagonal are skipped (warp-uniform; the barriers stay
        // uniform); only tiles that cross it, or the S tail, pay for the mask.
        const int n0 = j * BLOCK_N;
        if (!CAUSAL || n0 <= w0 + 15) {
            if (n0 + BLOCK_N > S || (CAUSAL && n0 + BLOCK_N - 1 > w0)) {
                attn_tile<CAUSAL, true>(o, m_run, l, qf, sK, sV, n0, row, S, lane);
            } else {
                attn_tile<CAUSAL, false>(o, m_run, l, qf, sK, sV, n0, row, S, lane);
            }
        }
    }
    cp_async_wait<0>();                                         // only empty groups are left

    // Epilogue: O / l as bf16 into this warp's own 16 rows of the Q tile (no other warp reads them;
    // swizzled, so the 4-byte writes are conflict-free), then 16-byte row chunks to global: whole
    // 128-byte lines per 8 lanes instead of 16-byte pieces of 8 rows per store instruction.
    const int t = lane & 3;
    const float l_row[2] = {fa_quad_sum(l[0]), fa_quad_sum(l[1])};
    unsigned char* sO = smem;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = warp * 16 + g + 8 * h;                  // row within the block's tile
        const float inv = l_row[h] > 0.f ? 1.f / l_row[h] : 0.f;
#pragma unroll
        for (int n = 0; n < HEAD_DIM / 8; ++n) {
            *reinterpret_cast<unsigned*>(sO + fa_off<HEAD_DIM, ROW_LD>(r, n) + 4 * t) =
                pack_bf16x2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
        }
        if (t == 0 && m0 + r < S) {
            LSE[m0 + r] = l_row[h] > 0.f ? (m_run[h] + fa_log2(l_row[h])) * LN2 : NEG_INF;
        }
    }
    __syncwarp();
    constexpr int CH = HEAD_DIM / 8, RPI = 32 / CH;               // chunks per row, rows per instruction
#pragma unroll
    for (int i = 0; i < 16 / RPI; ++i) {
        const int r = warp * 16 + i * RPI + lane / CH, c = lane % CH;
        if (m0 + r < S) {
            *reinterpret_cast<uint4*>(O + (size_t)(m0 + r) * HEAD_DIM + c * 8) =
                *reinterpret_cast<const uint4*>(sO + fa_off<HEAD_DIM, ROW_LD>(r, c));
        }
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_pipelined(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
                bf16_t* __restrict__ O, float* __restrict__ LSE, int S, int causal)
{
    if (causal) attn_body<true>(Q, K, V, O, LSE, S);
    else attn_body<false>(Q, K, V, O, LSE, S);
}

// The launch configuration of this build, for the host: out[0..7] = BLOCK_M, BLOCK_N, threads per
// block, dynamic shared memory bytes, HEAD_DIM, K/V stages, warps, swizzled (1) or padded (0).
// Grid: (ceil(S / BLOCK_M), B * H).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = BLOCK_M;
    out[1] = BLOCK_N;
    out[2] = NTHREADS;
    out[3] = SMEM_BYTES;
    out[4] = HEAD_DIM;
    out[5] = STAGES;
    out[6] = WARPS;
    out[7] = SWIZZLE;
}
