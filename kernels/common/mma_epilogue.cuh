// The plainest epilogue of an mma.sync GEMM: each thread stores its fp32 accumulators straight from
// registers as bf16, two adjacent columns (one bf16x2) per row and n8 tile, so a warp store covers 8 rows
// x 16 bytes. Introduced in chapter 06 (02_mma_ldmatrix.cu); rungs 03-06 reuse it (07 stages its tile in
// shared memory instead). acc[mi][ni] is the m16n8 accumulator fragment of rows row0 + 16 mi and columns
// col0 + 8 ni: lane (g = lane / 4, t = lane % 4) holds rows g and g + 8, columns 2t and 2t + 1.
// VEC_N: N is even and C 4-byte aligned, so each pair is one bf16x2 store; otherwise two checked stores.
#pragma once
#include <cuda_bf16.h>

template <bool VEC_N, int TILES_M, int TILES_N>
__device__ __forceinline__ void store_acc_direct(__nv_bfloat16* __restrict__ C, int M, int N, int row0, int col0,
                                                 const float (&acc)[TILES_M][TILES_N][4], int lane)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < TILES_M; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int m = row0 + mi * 16 + g + half * 8;
            if (m >= M) continue;
#pragma unroll
            for (int ni = 0; ni < TILES_N; ++ni) {
                const int n = col0 + ni * 8 + 2 * t;
                const float v0 = acc[mi][ni][2 * half], v1 = acc[mi][ni][2 * half + 1];
                if (VEC_N) {
                    if (n < N) {
                        *reinterpret_cast<__nv_bfloat162*>(C + (size_t)m * N + n) = __floats2bfloat162_rn(v0, v1);
                    }
                } else {
                    if (n < N) C[(size_t)m * N + n] = __float2bfloat16_rn(v0);
                    if (n + 1 < N) C[(size_t)m * N + n + 1] = __float2bfloat16_rn(v1);
                }
            }
        }
}
