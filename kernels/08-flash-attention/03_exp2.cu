// Chapter 08, rung 3: exp2 with the softmax scale folded in, fewer rescalings, no shuffles for l.
//
// Idea: 02_mma.cu spends, per score, a multiply by the scale, a subtract, __expf (itself a multiply by
// log2 e and MUFU.EX2), an add into a quad-reduced sum; and per tile and row 2 x 4 shuffles and a
// rescale of the whole O accumulator (d/4 multiplies per lane). The tensor cores take ~2 cycles of
// issue per 8 mma's; the scalar work of a tile is of the same order, so it shows. Here:
//  - exp(s * scale - m) = 2^(s * scale * log2 e - m'), m' the max in log2 units: one FFMA and one
//    ex2.approx per score (common/fast_exp.cuh), the scale folded into the FFMA.
//  - the row sum l is kept as a per-lane partial sum, reduced across the quad once in the epilogue.
//  - the running max is updated (and l, O rescaled by alpha) only when some row of the warp's tile
//    exceeds it by more than RESCALE_TAU = 8 (log2 units, FlashAttention-4's conditional rescaling):
//    p is then at most 2^8, exact enough in fp32 and as precise in bf16. After the first tiles of a row
//    the max rarely grows by 2^8, so the O rescale almost disappears. The final O / l and the LSE
//    (m' ln 2 + ln l) are exact whatever stale max was used, since O and l share it.
// Everything else is 02's (one K/V buffer, every key tile visited and masked element by element).
// Macros: HEAD_DIM (64, 128), WARPS (4; BLOCK_M = 16 * WARPS), BLOCK_N (64), SWIZZLE (1), RESCALE_TAU
// (8.0f; 0.0f: rescale whenever a max grows).
// Shapes: Q, K, V, O contiguous bf16 (B, H, S, d), LSE fp32 (B, H, S); any S >= 1 (key rows past S are
// zero-filled and masked to -inf, query rows past S are computed on zeros and not stored).
// contract: Q K V O bf16 (B,H,S,HEAD_DIM) contiguous, LSE fp32 (B,H,S), 16-byte aligned, S >= 1,
//           scale 1/sqrt(HEAD_DIM), causal: query i sees keys j <= i
// Launch: grid (ceil(S / BLOCK_M), B * H), block 32 * WARPS threads, dynamic shared memory
// (BLOCK_M + 2 BLOCK_N) * HEAD_DIM * 2 bytes (48 KB at d=128 with the defaults); launch_config().
//
// Prediction (B=16, H=16, S=4096, d=128; 2.2e12 FLOPs non-causal): per score ~3 instructions fewer
// (of ~8), per tile no shuffles for l and almost no O rescale (64 FMULs per lane, ~1/4 of the scalar
// work at d=128). Still one exposed K/V copy per tile. Expect +10-20% over 02: 170-250 TFLOP/s
// non-causal; causal still half of that in counted TFLOP/s. Registers about as 02's (226-238 at d=128).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "attention_fwd"):
//   exp2 at 16x16x4096x128x0: 7.4906 ms, 293.6 TFLOP/s, 46.1% of mma, 0.84x SDPA flash
//   exp2 at 16x16x4096x128x1: 7.5293 ms, 146.0 TFLOP/s, 22.9% of mma, 0.45x SDPA flash
//   exp2 at 16x16x4096x64x0: 3.9055 ms, 281.5 TFLOP/s, 44.2% of mma, 0.93x SDPA flash
//   exp2 at 16x16x4096x64x1: 4.0104 ms, 137.1 TFLOP/s, 21.5% of mma, 0.48x SDPA flash
//   exp2 at 1x16x16384x128x0: 7.4886 ms, 293.6 TFLOP/s, 46.1% of mma, 0.84x SDPA flash
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

template <bool CAUSAL>
__device__ __forceinline__ void attn_body(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K,
                                          const bf16_t* __restrict__ V, bf16_t* __restrict__ O,
                                          float* __restrict__ LSE, int S)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * BLOCK_M;
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

    const int ntiles = (S + BLOCK_N - 1) / BLOCK_N;
    for (int j = 0; j < ntiles; ++j) {
        const int n0 = j * BLOCK_N;
        fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(sK, K, n0, S, tid);
        fa_load_tile<BLOCK_N, HEAD_DIM, ROW_LD, NTHREADS>(sV, V, n0, S, tid);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();

        float s[BLOCK_N / 8][4];
        fa_qk<HEAD_DIM, ROW_LD, BLOCK_N>(s, qf, sK, lane);

        // mask (key past S; causal: key after the query) the raw scores; the row max of the tile
        float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int n = 0; n < BLOCK_N / 8; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int key = n0 + n * 8 + 2 * t + (q & 1), h = q >> 1;
                if (key >= S || (CAUSAL && key > row[h])) s[n][q] = NEG_INF;
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
        __syncthreads();                                    // every warp is done with sK, sV
    }
    const float l_row[2] = {fa_quad_sum(l[0]), fa_quad_sum(l[1])};
    const float m_nat[2] = {m_run[0] * LN2, m_run[1] * LN2};         // log2 units -> natural
    fa_store<HEAD_DIM>(O, LSE, o, l_row, m_nat, m0 + warp * 16, S, lane);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_exp2(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
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
