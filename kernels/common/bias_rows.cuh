// The grid-stride loop of a row-broadcast elementwise op: out[r, c] = OP(x[r, c], b[c]) over an M x N
// row-major bf16 matrix with a bias vector b of N. Introduced in chapter 03 (bias + GELU): the unfused
// bias add and the fused bias + GELU run this same loop and differ only in OP, so the measured gap
// between them is the temporary's traffic and nothing else.
//
// The matrix is walked in vectors of W bf16 (Vec<W>::T; W must divide N, so a vector never straddles a
// row), U vectors of x and U of b loaded per thread before the first OP. The column of each vector is
// tracked incrementally: a step of G = gridDim.x * blockDim.x vectors moves it by G mod (N / W), one
// conditional subtraction instead of a 64-bit modulo per vector.
#pragma once
#include <cuda_bf16.h>
#include "common/vector_io.cuh"

template <int W, int U, typename Vec<W>::T (*OP)(typename Vec<W>::T, typename Vec<W>::T)>
__device__ __forceinline__ void bias_rows_loop(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                               __nv_bfloat16* __restrict__ out, long long M, long long N)
{
    typedef typename Vec<W>::T V;
    const V* __restrict__ xv = reinterpret_cast<const V*>(x);
    const V* __restrict__ bv = reinterpret_cast<const V*>(b);
    V* __restrict__ ov = reinterpret_cast<V*>(out);
    const long long n_vec = M * (N / W);                                    // vectors in the matrix
    const long long row_vec = N / W;                                        // vectors per row
    const long long stride = (long long)gridDim.x * blockDim.x;             // G
    long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long c = v % row_vec;                                              // column (in vectors) of v
    const long long dc = stride % row_vec;                                  // how far a step of G moves it

    for (; v + (U - 1) * stride < n_vec; v += U * stride) {
        V xa[U], ba[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {                                       // all loads first
            xa[u] = xv[v + u * stride];
            ba[u] = bv[c];
            c += dc;
            if (c >= row_vec) c -= row_vec;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            ov[v + u * stride] = OP(xa[u], ba[u]);
        }
    }
    for (; v < n_vec; v += stride) {                                        // the last (< U) passes
        ov[v] = OP(xv[v], bv[c]);
        c += dc;
        if (c >= row_vec) c -= row_vec;
    }
}
