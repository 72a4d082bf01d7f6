// The tensor-core building blocks of chapter 08's FlashAttention forward rungs (02_mma.cu to
// 05_pipelined.cu): K/V/Q tiles from global into (swizzled) shared memory with cp.async, Q fragments held
// in registers, one warp's S = Q K^T and O += P V with mma.sync m16n8k16 (bf16 in, fp32 accumulate), the
// quad reductions of the online softmax, and the O / LSE epilogue. Introduced in chapter 08.
//
// Fragment map (chapter 06, 02_mma_ldmatrix.cu): in an m16n8 fp32 accumulator lane (g = lane/4,
// t = lane%4) holds rows g and g+8, columns 2t and 2t+1 (c[0], c[1] row g; c[2], c[3] row g+8). The A
// operand of m16n8k16 holds rows g, g+8 at k = 2t, 2t+1 (a0, a1) and k = 2t+8, 2t+9 (a2, a3). So the
// accumulators of two adjacent n8 tiles of S ARE the A operand of P V for one k16 step of keys, once
// packed to bf16 (fa_pack_p): P never leaves the registers. A row of S lives in the 4 lanes of a quad,
// whose reductions are two xor-shuffles (fa_quad_max, fa_quad_sum).
//
// Templates on the head dimension D, the tile rows, the key tile KN and the row pitch PITCH (elements: D
// when swizzled, D + 8 when padded); the XOR swizzle comes from common/smem_swizzle.cuh (define SWIZZLE
// first).
#pragma once
#include "common/bf16_bits.cuh"     // bf16_t, pack_bf16x2
#include "common/cp_async.cuh"      // cp_async16
#include "common/mma_sm80.cuh"      // ldmatrix_x4, ldmatrix_x4_trans, mma_bf16
#include "common/smem_swizzle.cuh"  // swz
#include "common/fast_exp.cuh"      // NEG_INF

// Byte offset of 16-byte chunk c of row r in a tile of D-element rows with pitch PITCH.
template <int D, int PITCH>
__device__ __forceinline__ unsigned fa_off(int r, int c)
{
    return (unsigned)(r * (PITCH * 2) + swz(r, c, D / 8) * 16);
}

// Rows [row0, row0 + ROWS) of a (rows x D) bf16 matrix at g into the tile at shared address s, NT threads
// sharing the 16-byte copies; rows at or past `rows` are zero-filled (cp.async src-size 0, nothing read).
template <int ROWS, int D, int PITCH, int NT>
__device__ __forceinline__ void fa_load_tile(unsigned s, const bf16_t* __restrict__ g, int row0, int rows,
                                             int tid)
{
    constexpr int CH = D / 8, TOTAL = ROWS * CH;
#pragma unroll
    for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
        const int q = tid + i * NT, r = q / CH, c = q % CH;
        if (TOTAL % NT != 0 && q >= TOTAL) break;              // only when NT does not divide the tile
        const bool ok = row0 + r < rows;
        const bf16_t* src = g + (size_t)(ok ? row0 + r : 0) * D + c * 8;
        cp_async16(s + fa_off<D, PITCH>(r, c), src, ok ? 16 : 0);
    }
}

// The A fragments of this warp's 16 query rows (tile rows r0 .. r0+15), all D/16 k-steps, from shared.
template <int D, int PITCH>
__device__ __forceinline__ void fa_load_q(unsigned (&qf)[D / 16][4], unsigned sQ, int r0, int lane)
{
    const int r = r0 + (lane & 15);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], sQ + fa_off<D, PITCH>(r, 2 * kk + (lane >> 4)));
}

// s[n][.] = Q K^T for the warp's 16 rows and the KN keys of the tile at sK (rows = keys). K rows are the
// "col" B operand as stored: ldmatrix (no .trans) lanes 0-7 / 8-15 give keys 0-7 at the low / high
// 8 dims of the k-step, lanes 16-31 the same for keys 8-15: b of n8 tiles 2nj and 2nj+1.
template <int D, int PITCH, int KN>
__device__ __forceinline__ void fa_qk(float (&s)[KN / 8][4], const unsigned (&qf)[D / 16][4], unsigned sK,
                                      int lane)
{
#pragma unroll
    for (int n = 0; n < KN / 8; ++n)
#pragma unroll
        for (int q = 0; q < 4; ++q) s[n][q] = 0.f;
    const int kr = (lane & 7) + ((lane >> 4) << 3), kc = (lane >> 3) & 1;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int nj = 0; nj < KN / 16; ++nj) {
            unsigned b[4];
            ldmatrix_x4(b, sK + fa_off<D, PITCH>(nj * 16 + kr, 2 * kk + kc));
            const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            mma_bf16(s[2 * nj], qf[kk], b0);
            mma_bf16(s[2 * nj + 1], qf[kk], b1);
        }
}

// P (fp32 accumulators of S tiles 2kk, 2kk+1) -> the bf16 A operand of key step kk of P V.
template <int KN>
__device__ __forceinline__ void fa_pack_p(unsigned (&a)[4], const float (&p)[KN / 8][4], int kk)
{
    a[0] = pack_bf16x2(p[2 * kk][0], p[2 * kk][1]);
    a[1] = pack_bf16x2(p[2 * kk][2], p[2 * kk][3]);
    a[2] = pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3]);
}

// o[d8 tile][.] += P V for the tile of KN keys at sV (rows = keys, D columns). V is k-major ([key][dim]),
// so ldmatrix .trans: lanes 0-15 give keys 0-15 at dim chunk 2dj, lanes 16-31 at chunk 2dj+1.
template <int D, int PITCH, int KN>
__device__ __forceinline__ void fa_pv(float (&o)[D / 8][4], const float (&p)[KN / 8][4], unsigned sV,
                                      int lane)
{
#pragma unroll
    for (int kk = 0; kk < KN / 16; ++kk) {
        unsigned a[4];
        fa_pack_p<KN>(a, p, kk);
#pragma unroll
        for (int dj = 0; dj < D / 16; ++dj) {
            unsigned b0[2], b1[2];
            ldmatrix_x4_trans(b0[0], b0[1], b1[0], b1[1],
                              sV + fa_off<D, PITCH>(kk * 16 + (lane & 15), 2 * dj + (lane >> 4)));
            mma_bf16(o[2 * dj], a, b0);
            mma_bf16(o[2 * dj + 1], a, b1);
        }
    }
}

// Max and sum over the 4 lanes of a quad (the 4 owners of one row).
__device__ __forceinline__ float fa_quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float fa_quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ float fa_log2(float x)   // lg2.approx: about 2^-22 relative; log2(0) = -inf
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// Epilogue of one warp: O rows r and r+8 (r = row0 + g, row0 the warp's first query row) divided by the
// row sums l (quad-reduced), stored as bf16x2 straight from the accumulators for rows < S; the LSE
// (natural log) m_nat + ln l by the quad's lane 0. A row with l == 0 (every key masked) gets O = 0 and
// LSE = -inf, never NaN. m_nat: the row max in natural units (raw score max times the softmax scale).
template <int D>
__device__ __forceinline__ void fa_store(bf16_t* __restrict__ O, float* __restrict__ LSE,
                                         const float (&o)[D / 8][4], const float (&l)[2],
                                         const float (&m_nat)[2], int row0, int S, int lane)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = row0 + g + 8 * h;
        const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
        if (r < S) {
            unsigned* dst = reinterpret_cast<unsigned*>(O + (size_t)r * D + 2 * t);
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                dst[n * 4] = pack_bf16x2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
            }
            if (t == 0) LSE[r] = l[h] > 0.f ? m_nat[h] + fa_log2(l[h]) * 0.6931471805599453f : NEG_INF;
        }
    }
}
