// store_tile_direct: the epilogue of the wgmma rungs that write C straight from the accumulator
// registers (bf16 pairs, rows past M and columns past N skipped). Introduced in chapter 07
// (01_wgmma_smem.cu); rungs 01-06 use it (07 stores through shared memory and TMA instead). sm_80 on.
#pragma once
#include "common/bf16_bits.cuh"   // bf16_t, pack_bf16x2

// Epilogue straight from registers. wgmma's fp32 accumulator layout (m64nN): warp w of the warpgroup
// holds rows 16w..16w+15; lane l holds rows 16w + l/4 and 16w + l/4 + 8 and, in every 8-column group j,
// columns 8j + 2(l%4) and 8j + 2(l%4) + 1: d[4j], d[4j+1] in the first row, d[4j+2], d[4j+3] in the
// second. Each thread writes bf16 pairs (4 bytes); rows past M and columns past N are skipped.
template <int TN>
__device__ __forceinline__ void store_tile_direct(const float (&d)[TN / 2], bf16_t* C, int M, int N,
                                                  int row0, int col0, int t128) {
    const int warp = t128 >> 5, lane = t128 & 31;
    const int r = row0 + warp * 16 + (lane >> 2);
    const int cb = col0 + 2 * (lane & 3);
    #pragma unroll
    for (int j = 0; j < TN / 8; ++j) {
        const int c = cb + 8 * j;
        if (c < N) {
            if (r < M)     *reinterpret_cast<unsigned*>(C + (long long)r * N + c)       = pack_bf16x2(d[4 * j],     d[4 * j + 1]);
            if (r + 8 < M) *reinterpret_cast<unsigned*>(C + (long long)(r + 8) * N + c) = pack_bf16x2(d[4 * j + 2], d[4 * j + 3]);
        }
    }
}
