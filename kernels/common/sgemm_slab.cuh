// The global -> register load of one BK-deep slab of an SGEMM, introduced in chapter 05 (06_vectorized.cu;
// 07_warptile.cu reuses it): this thread's float4 share of the A slab (rows bm.., columns k0..k0+BK-1) and
// of the B slab (rows k0.., columns bn..). `fast`: the whole slab is inside A and B and 16-byte loads are
// legal; otherwise each element is checked and zero-filled. The including file defines the tile macros
// first: BK, BN, NT (threads per block), A_VECS and B_VECS (float4 of each slab per thread).
#pragma once

#if !defined(BK) || !defined(BN) || !defined(NT) || !defined(A_VECS) || !defined(B_VECS)
#error "common/sgemm_slab.cuh needs BK, BN, NT, A_VECS and B_VECS defined before it is included"
#endif

__device__ __forceinline__ void load_slab(const float* __restrict__ A, const float* __restrict__ B,
                                          int M, int N, int K, int bm, int bn, int k0, bool fast,
                                          float4 (&ra)[A_VECS], float4 (&rb)[B_VECS])
{
    const int tid = threadIdx.x;
    if (fast) {
#pragma unroll
        for (int j = 0; j < A_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
            ra[j] = *reinterpret_cast<const float4*>(A + (long long)(bm + r) * K + k0 + c);
        }
#pragma unroll
        for (int j = 0; j < B_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
            rb[j] = *reinterpret_cast<const float4*>(B + (long long)(k0 + r) * N + bn + c);
        }
    } else {
#pragma unroll
        for (int j = 0; j < A_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
            const int gm = bm + r, gk = k0 + c;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if (gm < M) {
                const float* p = A + (long long)gm * K;
#pragma unroll
                for (int i = 0; i < 4; ++i) v[i] = (gk + i < K) ? p[gk + i] : 0.f;
            }
            ra[j] = make_float4(v[0], v[1], v[2], v[3]);
        }
#pragma unroll
        for (int j = 0; j < B_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
            const int gk = k0 + r, gn = bn + c;
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            if (gk < K) {
                const float* p = B + (long long)gk * N;
#pragma unroll
                for (int i = 0; i < 4; ++i) v[i] = (gn + i < N) ? p[gn + i] : 0.f;
            }
            rb[j] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}
