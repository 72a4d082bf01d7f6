// Chapter 08, rung 4: causal attention that skips the key tiles above the diagonal.
//
// Idea: 02 and 03 visit every key tile for every query tile and mask element by element, so causal
// attention does all of non-causal's work and throws half away. Query tile [m0, m0 + BLOCK_M) can only
// see keys < m0 + BLOCK_M: its loop stops there (on average half the tiles: (T + 1) / 2T of them for
// T query tiles). Of those, only the tiles that cross the diagonal (and the S tail) need a mask; the
// tile body is a template on MASK, so the others pay nothing for it (no index arithmetic, no select).
// Finer still: with 16 query rows per warp, a tile can lie above one warp's diagonal and below another's;
// that warp skips it (a warp-uniform branch; the block's barriers stay uniform), saving about half of
// the diagonal tiles' mma's. Blocks start with the heaviest query tiles (blockIdx.x reversed), so the
// light ones fill the last wave: the grid's work is uneven, 1 to T tiles a block.
// Everything else is 03's (exp2 folding, conditional rescale, one K/V buffer).
// Macros: HEAD_DIM (64, 128), WARPS (4; BLOCK_M = 16 * WARPS), BLOCK_N (64), SWIZZLE (1), RESCALE_TAU (8).
// Shapes: Q, K, V, O contiguous bf16 (B, H, S, d), LSE fp32 (B, H, S); any S >= 1 (key rows past S are
// zero-filled and masked to -inf, query rows past S are computed on zeros and not stored).
// contract: Q K V O bf16 (B,H,S,HEAD_DIM) contiguous, LSE fp32 (B,H,S), 16-byte aligned, S >= 1,
//           scale 1/sqrt(HEAD_DIM), causal: query i sees keys j <= i
// Launch: grid (ceil(S / BLOCK_M), B * H) (causal: blockIdx.x = T - 1 - query tile), block 32 * WARPS,
// dynamic shared memory (BLOCK_M + 2 BLOCK_N) * HEAD_DIM * 2 bytes; launch_config() writes the geometry.
//
// Prediction (B=16, H=16, S=4096, d=128, causal; 1.1e12 FLOPs counted): the mma work falls from 64 to
// 32.5 tiles per query tile, plus ~1/2 tile of masked work on the diagonal: causal time ~0.52x of
// non-causal, i.e. counted causal TFLOP/s ~ 0.95x of the non-causal figure (which is 03's, unchanged:
// 170-250 TFLOP/s). From ~half of 03's figure to 160-240 TFLOP/s causal.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "attention_fwd"):
//   causal_skip at 16x16x4096x128x0: 7.8169 ms, 281.3 TFLOP/s, 44.2% of mma, 0.83x SDPA flash
//   causal_skip at 16x16x4096x128x1: 4.0176 ms, 273.7 TFLOP/s, 43.0% of mma, 0.85x SDPA flash
//   causal_skip at 16x16x4096x64x0: 3.8005 ms, 289.3 TFLOP/s, 45.4% of mma, 0.96x SDPA flash
//   causal_skip at 16x16x4096x64x1: 2.0480 ms, 268.4 TFLOP/s, 42.2% of mma, 0.95x SDPA flash
//   causal_skip at 1x16x16384x128x0: 7.4424 ms, 295.5 TFLOP/s, 46.4% of mma, 0.84x SDPA flash
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef WARPS
#define WARPS 4
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
#define Q_BYTES (BLOCK_M * ROW_LD * 2)
#define KV_BYTES (BLOCK_N * ROW_LD * 2)
#define SMEM_BYTES (Q_BYTES + 2 * KV_BYTES)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
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
    const unsigned sQ = smem_u32(smem), sK = sQ + Q_BYTES, sV = sK + KV_BYTES;

    fa_load_tile<BLOCK_M, HEAD_DIM, ROW_LD, NTHREADS>(sQ, Q, m0, S, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    unsigned qf[HEAD_DIM / 16][4];
    fa_load_q<HEAD_DIM, ROW_LD>(qf, sQ, warp * 16, lane);

    float o[HEAD_DIM / 8][4];
#pragma unroll
    for (int n = 0; n < HEAD_DIM / 8; ++n)
#pragma unroll
        for (int q = 0; q < 4; ++q) o[n][q] = 0.f;
    float m_run[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};   // m in log2 units; l per lane
    const int row[2] = {m0 + warp * 16 + g, m0 + warp * 16 + g + 8};

    const int n_end = CAUSAL ? min(S, m0 + BLOCK_M) : S;           // keys this block can see
    const int ntiles = (n_end + BLOCK_N - 1) / BLOCK_N;
    for (int j = 0; j < ntiles; ++j) {
        const int n0 = j * BLOCK_N;
        fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(sK, K, n0, S, tid);
        fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(sV, V, n0, S, tid);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();

        // Tiles entirely above this warp's diagonal are skipped (warp-uniform; the barriers stay
        // uniform); only tiles that cross it, or the S tail, pay for the mask.
        const int w0 = m0 + warp * 16;
        if (!CAUSAL || n0 <= w0 + 15) {
            if (n0 + BLOCK_N > S || (CAUSAL && n0 + BLOCK_N - 1 > w0)) {
                attn_tile<CAUSAL, true>(o, m_run, l, qf, sK, sV, n0, row, S, lane);
            } else {
                attn_tile<CAUSAL, false>(o, m_run, l, qf, sK, sV, n0, row, S, lane);
            }
        }
        __syncthreads();                                    // every warp is done with sK, sV
    }
    const float l_row[2] = {fa_quad_sum(l[0]), fa_quad_sum(l[1])};
    const float m_nat[2] = {m_run[0] * LN2, m_run[1] * LN2};         // log2 units -> natural
    fa_store<HEAD_DIM>(O, LSE, o, l_row, m_nat, m0 + warp * 16, S, lane);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_causal_skip(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
                  bf16_t* __restrict__ O, float* __restrict__ LSE, int S, int causal)
{
    if (causal) attn_body<true>(Q, K, V, O, LSE, S);
    else attn_body<false>(Q, K, V, O, LSE, S);
}

// The launch configuration of this build, for the host: out[0..7] = BLOCK_M, BLOCK_N, threads per
// block, dynamic shared memory bytes, HEAD_DIM, K/V stages (1), warps, swizzled (1) or padded (0).
// Grid: (ceil(S / BLOCK_M), B * H).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = BLOCK_M;
    out[1] = BLOCK_N;
    out[2] = NTHREADS;
    out[3] = SMEM_BYTES;
    out[4] = HEAD_DIM;
    out[5] = 1;
    out[6] = WARPS;
    out[7] = SWIZZLE;
}
