// Chapter 08, rung 2: the fused kernel on tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate).
//
// Idea: 01_fused_simt.cu does the right amount of work (S and P never touch DRAM) at CUDA-core speed.
// Here both matrix products move to mma.sync, with the data paths of chapter 06:
//  - Q is read once: the block's BLOCK_M x d tile goes to shared memory with cp.async and each warp
//    keeps the A fragments of its 16 query rows in registers for the whole key loop (d/16 x 4 words).
//  - K and V tiles (BLOCK_N x d) come in through cp.async into XOR-swizzled shared memory (rows of
//    d * 2 = 128 or 256 bytes, chunk c of row r at c ^ (r % 8): conflict-free ldmatrix and cp.async).
//    K's rows are the "col" B operand of S = Q K^T as stored (ldmatrix); V's rows need ldmatrix .trans.
//  - S lands in mma accumulators; the online softmax works on them in registers (each row of S is
//    spread over the 4 lanes of a quad: two xor-shuffles reduce it), and the accumulators of two n8
//    tiles of P, packed to bf16, are exactly the A operand of one k16 step of O += P V: P never goes
//    through shared memory (common/flash_mma.cuh).
// Deliberately plain, so the later rungs have something to improve: natural exp with the scale applied
// to every score, the row sum reduced across the quad and O rescaled after every tile, one K/V buffer
// (load, wait, compute, barrier: the copy latency is exposed, hidden only by the other resident block),
// and causal attention visits every key tile and masks element by element (so causal costs as much
// as non-causal: half the reported TFLOP/s).
// Macros: HEAD_DIM (64 or 128), WARPS (4; BLOCK_M = 16 * WARPS), BLOCK_N (64), SWIZZLE (1; 0: rows
// padded by 16 bytes).
// Shapes: Q, K, V, O contiguous bf16 (B, H, S, d), LSE fp32 (B, H, S); any S >= 1 (key rows past S are
// zero-filled and masked to -inf, query rows past S are computed on zeros and not stored).
// contract: Q K V O bf16 (B,H,S,HEAD_DIM) contiguous, LSE fp32 (B,H,S), 16-byte aligned, S >= 1,
//           scale 1/sqrt(HEAD_DIM), causal: query i sees keys j <= i
// Launch: grid (ceil(S / BLOCK_M), B * H), block 32 * WARPS threads, dynamic shared memory
// (BLOCK_M + 2 BLOCK_N) * HEAD_DIM * 2 bytes (48 KB at d=128 with the defaults: the attribute must be
// raised above 48 KB for other settings); launch_config() writes the geometry.
//
// Prediction (B=16, H=16, S=4096, d=128): 4 B H S^2 d = 2.2e12 FLOPs (1.1e12 causal); DRAM floor
// 4 x 268 MB = 1.07 GB -> 0.26 ms, the mma.sync roof 3.5 ms: compute-bound. Shared memory per warp and
// key tile: 32 KB of ldmatrix for 0.52 MFLOP (16 FLOP/B, the SM's 128 B/clk allows ~2000 FLOP/clk of
// the 2400 the roof needs), plus the exposed copy of every tile and ~3 FP32/MUFU instructions per score.
// Expect 150-220 TFLOP/s non-causal (25-35% of the 636 TFLOP/s roof, 0.4-0.6x SDPA flash), half that
// in causal TFLOP/s. Registers: O 64, S 32, Q 32 and the K/V fragments ptxas keeps in flight: 232 at
// d=128 (sm_80), so 2 blocks of 4 warps per SM (the registers allow 2, shared memory 4).
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "attention_fwd"):
//   mma at 16x16x4096x128x0: 8.0029 ms, 274.8 TFLOP/s, 43.1% of mma, 0.78x SDPA flash
//   mma at 16x16x4096x128x1: 10.6163 ms, 103.6 TFLOP/s, 16.3% of mma, 0.32x SDPA flash
//   mma at 16x16x4096x64x0: 4.3344 ms, 253.7 TFLOP/s, 39.8% of mma, 0.84x SDPA flash
//   mma at 16x16x4096x64x1: 6.3219 ms, 87.0 TFLOP/s, 13.7% of mma, 0.31x SDPA flash
//   mma at 1x16x16384x128x0: 7.8582 ms, 279.8 TFLOP/s, 43.9% of mma, 0.79x SDPA flash
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
    float m_run[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f};
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

        // scale, mask (key past S; causal: key after the query), row max over the tile
        float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
        for (int n = 0; n < BLOCK_N / 8; ++n)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int key = n0 + n * 8 + 2 * t + (q & 1), h = q >> 1;
                float x = s[n][q] * SM_SCALE;
                if (key >= S || (CAUSAL && key > row[h])) x = NEG_INF;
                s[n][q] = x;
                mx[h] = fmaxf(mx[h], x);
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float m_new = fmaxf(m_run[h], fa_quad_max(mx[h]));
            const float m_use = m_new == NEG_INF ? 0.f : m_new;    // all masked so far: avoid -inf - -inf
            const float alpha = __expf(m_run[h] - m_use);
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < BLOCK_N / 8; ++n)
#pragma unroll
                for (int q = 2 * h; q < 2 * h + 2; ++q) {
                    s[n][q] = __expf(s[n][q] - m_use);
                    sum += s[n][q];
                }
            l[h] = l[h] * alpha + fa_quad_sum(sum);
            m_run[h] = m_new;
#pragma unroll
            for (int n = 0; n < HEAD_DIM / 8; ++n) {
                o[n][2 * h] *= alpha;
                o[n][2 * h + 1] *= alpha;
            }
        }

        fa_pv<HEAD_DIM, ROW_LD, BLOCK_N>(o, s, sV, lane);
        __syncthreads();                                    // every warp is done with sK, sV
    }
    fa_store<HEAD_DIM>(O, LSE, o, l, m_run, m0 + warp * 16, S, lane);
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
flash_mma(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
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
