// Chapter 08, rung 1: one fused kernel per query tile, online softmax, CUDA cores in fp32.
//
// Idea: the naive attention (QK^T, softmax, PV as three kernels, torch in the lab) writes and reads
// the B H S^2 score matrix in DRAM: 2 bytes x 4.3e9 scores at B=16, H=16, S=4096, several times over.
// Here one block owns BLOCK_M query rows and streams the keys in tiles of BLOCK_N: S = Q K^T for the
// tile goes to registers, the online softmax (chapter 04) keeps a running max m and sum l per row and
// rescales the output accumulator when m grows, P goes through a small shared tile into O += P V.
// Nothing of size S^2 exists anywhere; DRAM traffic is Q, K, V read and O written (per block, K and V
// come again from L2).
// Thread map (256 threads, BLOCK_M = 32 rows): thread (r, c) = (tid / 8, tid % 8): row r of the tile,
// scores for keys c, c+8, c+16, c+24 (dot products over d from fp32 copies of Q and K in shared memory),
// and output dims 4c + 32i .. +3 (i < d/32). The 8 threads of a row are 8 consecutive lanes: their row
// max and sum are xor-shuffles over 1, 2, 4; m and l are kept, identical, by all 8.
// Numerics: fp32 throughout (bf16 inputs decoded exactly), __expf, O rounded to bf16 once. Causal
// visits every key tile and masks element by element (skipping tiles is rung 04's change).
// Macros: HEAD_DIM (64 or 128), BLOCK_N (32; a multiple of 8).
// Shapes: Q, K, V, O contiguous bf16 (B, H, S, d), LSE fp32 (B, H, S); any S >= 1 (keys past S masked,
// rows past S neither loaded nor stored).
// contract: Q K V O bf16 (B,H,S,HEAD_DIM) contiguous, LSE fp32 (B,H,S), 16-byte aligned, S >= 1,
//           scale 1/sqrt(HEAD_DIM), causal: query i sees keys j <= i
// Launch: grid (ceil(S / 32), B * H), block 256, dynamic shared memory
// (32 + BLOCK_N) (d + 4) 4 + BLOCK_N d 4 + 32 (BLOCK_N + 1) 4 bytes (54 KB at d=128: raise the attribute);
// launch_config() writes the geometry.
//
// Prediction (B=16, H=16, S=4096, d=128): 2.2e12 FLOPs, so at the 67 TFLOP/s fp32 FMA peak >= 33 ms.
// Per key tile a thread does 2 x 4 x d FMAs against (d/4)(1 + 4) + 32 (1 + d/32) shared loads: the
// 16-byte K and V loads of a warp (4 per clock of the SM's 128 B/clk) bound it near 25% of the FMA
// peak. Expect 12-25 TFLOP/s (2-4% of the mma.sync roof, 0.03-0.07x SDPA flash), causal half that.
//
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "attention_fwd"):
//   fused_simt at 16x16x4096x128x0: 160.1380 ms, 13.7 TFLOP/s, 2.2% of mma, 0.04x SDPA flash
//   fused_simt at 16x16x4096x128x1: 160.1454 ms, 6.9 TFLOP/s, 1.1% of mma, 0.02x SDPA flash
//   fused_simt at 16x16x4096x64x0: 84.0810 ms, 13.1 TFLOP/s, 2.1% of mma, 0.04x SDPA flash
//   fused_simt at 16x16x4096x64x1: 84.0091 ms, 6.5 TFLOP/s, 1.0% of mma, 0.02x SDPA flash
#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 32
#endif
#ifndef SM_SCALE
#define SM_SCALE (HEAD_DIM == 64 ? 0.125f : 0.08838834764831845f)   // 1 / sqrt(HEAD_DIM)
#endif

#define BLOCK_M 32
#define NTHREADS 256
#define TPR 8                                 // threads per query row
#define KPT (BLOCK_N / TPR)                   // keys per thread
#define DPT (HEAD_DIM / TPR)                  // output dims per thread
#define QK_LD (HEAD_DIM + 4)                  // fp32 row pitch of Q and K: 8 rows, 8 bank groups
#define P_LD (BLOCK_N + 1)
#define SQ_FLOATS (BLOCK_M * QK_LD)
#define SK_FLOATS (BLOCK_N * QK_LD)
#define SV_FLOATS (BLOCK_N * HEAD_DIM)
#define SP_FLOATS (BLOCK_M * P_LD)
#define SMEM_BYTES ((SQ_FLOATS + SK_FLOATS + SV_FLOATS + SP_FLOATS) * 4)

static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert(BLOCK_N % TPR == 0, "BLOCK_N: a multiple of 8");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory: 227 KB per block at most");

#include "common/bf16_bits.cuh"   // bf16_t, pack_bf16x2
#include "common/fast_exp.cuh"    // NEG_INF

// rows [row0, row0 + ROWS) of a (rows x d) bf16 matrix -> fp32 shared rows of pitch ld; rows past `rows`
// are zero (so no NaN can come from memory outside the tensor).
template <int ROWS>
__device__ __forceinline__ void load_rows_f32(float* dst, int ld, const bf16_t* __restrict__ src, int row0,
                                              int rows, int tid)
{
    constexpr int CH = HEAD_DIM / 8;                     // 16-byte chunks per row
    for (int q = tid; q < ROWS * CH; q += NTHREADS) {
        const int r = q / CH, c = q % CH;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(src + (size_t)(row0 + r) * HEAD_DIM + c * 8);
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
        float* d = dst + r * ld + c * 8;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            d[2 * i] = __uint_as_float(w[i] << 16);         // bf16 -> fp32 is exact: the top 16 bits
            d[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
}

template <bool CAUSAL>
__device__ __forceinline__ void attn_body(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K,
                                          const bf16_t* __restrict__ V, bf16_t* __restrict__ O,
                                          float* __restrict__ LSE, int S)
{
    extern __shared__ __align__(16) float fsm[];
    float* sQ = fsm;
    float* sK = sQ + SQ_FLOATS;
    float* sV = sK + SK_FLOATS;
    float* sP = sV + SV_FLOATS;
    const int tid = threadIdx.x, r = tid / TPR, c = tid % TPR;
    const int m0 = blockIdx.x * BLOCK_M, row = m0 + r;
    const size_t head = (size_t)blockIdx.y * S * HEAD_DIM;
    Q += head; K += head; V += head; O += head;
    LSE += (size_t)blockIdx.y * S;

    load_rows_f32<BLOCK_M>(sQ, QK_LD, Q, m0, S, tid);
    float o[DPT];
#pragma unroll
    for (int i = 0; i < DPT; ++i) o[i] = 0.f;
    float m_run = NEG_INF, l = 0.f;

    for (int n0 = 0; n0 < S; n0 += BLOCK_N) {
        __syncthreads();                                   // the previous tile is consumed
        load_rows_f32<BLOCK_N>(sK, QK_LD, K, n0, S, tid);
        load_rows_f32<BLOCK_N>(sV, HEAD_DIM, V, n0, S, tid);
        __syncthreads();

        // scores of keys c + 8 jj: d-long dot products, 4 dims per 16-byte load
        float s[KPT];
#pragma unroll
        for (int jj = 0; jj < KPT; ++jj) s[jj] = 0.f;
#pragma unroll 4
        for (int k = 0; k < HEAD_DIM; k += 4) {
            const float4 q = *reinterpret_cast<const float4*>(sQ + r * QK_LD + k);
#pragma unroll
            for (int jj = 0; jj < KPT; ++jj) {
                const float4 kv = *reinterpret_cast<const float4*>(sK + (c + TPR * jj) * QK_LD + k);
                s[jj] = fmaf(q.x, kv.x, fmaf(q.y, kv.y, fmaf(q.z, kv.z, fmaf(q.w, kv.w, s[jj]))));
            }
        }
        float mx = NEG_INF;
#pragma unroll
        for (int jj = 0; jj < KPT; ++jj) {
            const int key = n0 + c + TPR * jj;
            s[jj] = (key < S && (!CAUSAL || key <= row)) ? s[jj] * SM_SCALE : NEG_INF;
            mx = fmaxf(mx, s[jj]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        const float m_new = fmaxf(m_run, mx);
        const float m_use = m_new == NEG_INF ? 0.f : m_new;   // every key masked so far: p = 0, no NaN
        const float alpha = __expf(m_run - m_use);
        float sum = 0.f;
#pragma unroll
        for (int jj = 0; jj < KPT; ++jj) {
            const float p = __expf(s[jj] - m_use);
            sum += p;
            sP[r * P_LD + c + TPR * jj] = p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        sum += __shfl_xor_sync(0xffffffffu, sum, 4);
        l = l * alpha + sum;
        m_run = m_new;
#pragma unroll
        for (int i = 0; i < DPT; ++i) o[i] *= alpha;
        __syncwarp();                                      // the row's P (written by 8 lanes of this warp)

        // O[r, 4c + 32i ..] += sum_j P[r, j] V[j, 4c + 32i ..]
#pragma unroll 4
        for (int j = 0; j < BLOCK_N; ++j) {
            const float p = sP[r * P_LD + j];
#pragma unroll
            for (int i = 0; i < DPT / 4; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(sV + j * HEAD_DIM + 4 * c + 32 * i);
                o[4 * i] = fmaf(p, v.x, o[4 * i]);
                o[4 * i + 1] = fmaf(p, v.y, o[4 * i + 1]);
                o[4 * i + 2] = fmaf(p, v.z, o[4 * i + 2]);
                o[4 * i + 3] = fmaf(p, v.w, o[4 * i + 3]);
            }
        }
    }

    if (row < S) {
        const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
        for (int i = 0; i < DPT / 4; ++i) {
            uint2 w;
            w.x = pack_bf16x2(o[4 * i] * inv, o[4 * i + 1] * inv);
            w.y = pack_bf16x2(o[4 * i + 2] * inv, o[4 * i + 3] * inv);
            *reinterpret_cast<uint2*>(O + (size_t)row * HEAD_DIM + 4 * c + 32 * i) = w;
        }
        if (c == 0) LSE[row] = l > 0.f ? m_run + __logf(l) : NEG_INF;
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS)
flash_simt(const bf16_t* __restrict__ Q, const bf16_t* __restrict__ K, const bf16_t* __restrict__ V,
           bf16_t* __restrict__ O, float* __restrict__ LSE, int S, int causal)
{
    if (causal) attn_body<true>(Q, K, V, O, LSE, S);
    else attn_body<false>(Q, K, V, O, LSE, S);
}

// The launch configuration of this build, for the host: out[0..7] = BLOCK_M, BLOCK_N, threads per
// block, dynamic shared memory bytes, HEAD_DIM, K/V stages (1), warps (8), swizzled (0).
// Grid: (ceil(S / BLOCK_M), B * H).
extern "C" __global__ void launch_config(int* out)
{
    out[0] = BLOCK_M;
    out[1] = BLOCK_N;
    out[2] = NTHREADS;
    out[3] = SMEM_BYTES;
    out[4] = HEAD_DIM;
    out[5] = 1;
    out[6] = NTHREADS / 32;
    out[7] = 0;
}
