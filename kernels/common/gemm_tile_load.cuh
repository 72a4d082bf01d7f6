// The k-tile loader of chapter 06's cp.async rungs (03_cp_async.cu to 07_rasterized.cu): one k-tile of A
// (BM x BK) and B (BK x BN), bf16 row-major, from global into one shared-memory slot, with zero fill
// past the matrix. Introduced in chapter 06 (03_cp_async.cu).
//
// It is sized by the tile macros of the including file, which must be defined before the #include:
// A_LOADS, B_LOADS (16-byte copies per thread per k-tile), A_CHUNKS, B_CHUNKS (16-byte chunks per tile
// row), A_ROW_STEP, B_ROW_STEP (rows between a thread's copies), A_LD, B_LD (row length in elements)
// and SWIZZLE (for swz, common/smem_swizzle.cuh).
#pragma once
#include <cuda_bf16.h>
#include "common/cp_async.cuh"       // cp_async16
#include "common/smem_swizzle.cuh"   // swz

#if !defined(A_LOADS) || !defined(B_LOADS) || !defined(A_CHUNKS) || !defined(B_CHUNKS) || \
    !defined(A_ROW_STEP) || !defined(B_ROW_STEP) || !defined(A_LD) || !defined(B_LD)
#error "common/gemm_tile_load.cuh: define the tile macros (A_LOADS ... B_LD) before including it"
#endif

// One k-tile's worth of global -> shared copies, load indices [lo, hi) of this thread's A_LOADS + B_LOADS.
// VEC_N: 16-byte cp.async with zero-fill. !VEC_N (N % 8 != 0): B rows are not 16-byte aligned, so B is
// read one element at a time and stored with a plain 16-byte st.shared (synchronous, same slot rules).
// lo and hi are compile-time constants after unrolling, so the selection costs nothing.
template <bool VEC_N>
__device__ __forceinline__ void load_tile(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                                          int M, int N, int K, int m0, int n0, int k0, unsigned sA, unsigned sB,
                                          unsigned char* sB_ptr, int tid, int lo, int hi)
{
    const int a_r = tid / A_CHUNKS, a_c = tid % A_CHUNKS;
    const int b_r = tid / B_CHUNKS, b_c = tid % B_CHUNKS;
#pragma unroll
    for (int i = 0; i < A_LOADS + B_LOADS; ++i) {
        if (i < lo || i >= hi) continue;
        if (i < A_LOADS) {
            const int r = a_r + i * A_ROW_STEP;
            const int m = m0 + r, k = k0 + a_c * 8;
            const bool ok = m < M && k < K;
            const __nv_bfloat16* src = ok ? A + (size_t)m * K + k : A;
            cp_async16(sA + r * (A_LD * 2) + swz(r, a_c, A_CHUNKS) * 16, src, ok ? 16 : 0);
        } else {
            const int r = b_r + (i - A_LOADS) * B_ROW_STEP;
            const int k = k0 + r, n = n0 + b_c * 8;
            const int off = r * (B_LD * 2) + swz(r, b_c, B_CHUNKS) * 16;
            if (VEC_N) {
                const bool ok = k < K && n < N;
                const __nv_bfloat16* src = ok ? B + (size_t)k * N + n : B;
                cp_async16(sB + off, src, ok ? 16 : 0);
            } else {
                const unsigned short* row = reinterpret_cast<const unsigned short*>(B) + (size_t)k * N;
                unsigned v[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const unsigned e0 = (k < K && n + 2 * j < N) ? row[n + 2 * j] : 0u;
                    const unsigned e1 = (k < K && n + 2 * j + 1 < N) ? row[n + 2 * j + 1] : 0u;
                    v[j] = e0 | (e1 << 16);
                }
                *reinterpret_cast<uint4*>(sB_ptr + off) = make_uint4(v[0], v[1], v[2], v[3]);
            }
        }
    }
}
