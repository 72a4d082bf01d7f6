// Chapter 05, version 6: 16-byte loads everywhere: float4 from global memory, A transposed in shared
// memory so that the inner loop reads float4 from shared memory too.
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major
//
// Idea: the tiles of version 5 (128 x 128 x 8, 8 x 8 per thread, 256 threads), with three changes.
//  1. Global loads are float4: a thread stages one 16-byte vector of the A slab (4 consecutive k of
//     one row) and one of the B slab (4 consecutive n) per step: 2 load instructions instead of 8.
//  2. A is stored TRANSPOSED, As[k][m]: the 8 values of A a thread needs at step k (its rows m0..m0+7,
//     one column k) become contiguous, so they are 2 float4 loads (LDS.128) instead of 8 scalar
//     ones; B's 8 values were already contiguous, also 2 float4. Per k: 4 shared loads for 64 FMAs
//     (version 5's source: 16). The transposing store writes the 4 floats of an A vector one by one,
//     to rows k..k+3 of As: with a row pitch of BM the two threads that share a row m hit the same bank
//     (a 2-way conflict); a pitch of BM + APAD = 132 puts row k+4 16 banks away: conflict-free.
//     TRANSPOSE_A=0 keeps As[m][k] (float4 stores) and APAD=0 drops the padding: the two variants
//     measure what the transpose and the padding buy. Beware a compiler that helps: with the slab's k
//     loop fully unrolled, ptxas itself loads each row's 8 values As[m][0..7] of the untransposed tile
//     as 2 LDS.128 (SASS: 32 LDS.128 per slab with or without the transpose). What the transpose still
//     buys is the bank pattern (the untransposed rows of a warp's 2 thread-rows are 256 bytes apart:
//     2-way conflicts) and registers (the untransposed loads hold a whole slab of A: 128 vs 115).
//  3. Full tiles take a fast path; the rest a checked path, decided per slab: a slab is fast when the
//     block's whole 128 x 128 tile of C is inside C, the slab is inside K, and 16-byte loads are legal
//     (K % 4 == 0, N % 4 == 0, A and B 16-byte aligned). The checked path loads element by element,
//     zero-filling outside A and B. The store is float4 for full tiles when N % 4 == 0 and C is
//     aligned, otherwise element by element with bounds checks. So any M, N, K >= 1 works; shapes with
//     N or K not a multiple of 4 are correct but take the slow path everywhere.
// The thread layout is version 5's: a warp is 2 thread-rows x 16 thread-columns; its B loads are 16
// float4 32 bytes apart, 4 wavefronts each (banks 4-7, 12-15, ... unused); A loads are 2 float4, one
// wavefront. Version 7 fixes the B pattern.
//
// Launch: grid = (ceil(N/BN), ceil(M/BM)), block = (BM/TM)*(BN/TN) = 256 threads (1-D), static shared
// memory (BK*(BM+APAD) + BK*BN)*4 = 8.3 KB, no dynamic shared memory. __launch_bounds__(256, 2).
//
// Prediction (4096^3, 137.4 GFLOP): per k a warp issues 64 FFMA and 4 LDS.128 using ~10 shared
// wavefronts (16 warps per SM: ~60% of the shared pipe): shared memory no longer binds. With the
// per-slab loads, stores and barriers, ~85-90% of issued instructions are FFMA (SASS: 512 FFMA of the
// slab loop's 631 instructions, the checked path that full tiles skip included), 115-128 registers. What remains
// is latency: each slab is loaded, stored, synchronised and only then computed, so a block stalls on
// global memory once per slab (~1 us at 8 k-steps of ~0.3 us of math), hidden only by the other
// block on the SM. Expect ~30-38 TFLOP/s, 60-75% of cuBLAS; TRANSPOSE_A=0 0-10% slower (~20% more
// shared wavefronts, the same instructions), APAD=0 within a few percent (the transposing stores are
// 4 per thread per slab, the loads 32 LDS.128).
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   vectorized at 4096x4096x4096: 3.8542 ms, 35.7 TFLOP/s, 54.6% of fp32, 0.70x cuBLAS fp32 (TF32 off)
//   vectorized at 8192x1024x4096: 1.9429 ms, 35.4 TFLOP/s, 54.2% of fp32, 0.70x cuBLAS fp32 (TF32 off)

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#ifndef TRANSPOSE_A
#define TRANSPOSE_A 1     // 1: As[k][m] (float4 reads in the inner loop); 0: As[m][k] (scalar reads in the source)
#endif
#ifndef APAD
#define APAD 4            // extra floats per row of the transposed As (a multiple of 4 keeps float4 alignment)
#endif
#define NT ((BM / TM) * (BN / TN))   // threads per block
#define A_VECS (BM * BK / 4 / NT)    // float4 of the A slab per thread per step
#define B_VECS (BK * BN / 4 / NT)
#if TRANSPOSE_A
#define AS_SIZE (BK * (BM + APAD))
#else
#define AS_SIZE (BM * BK)
#endif

static_assert(BM % TM == 0 && BN % TN == 0, "thread tile must divide the block tile");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0 && APAD % 4 == 0, "float4 granularity");
static_assert((BM * BK / 4) % NT == 0 && (BK * BN / 4) % NT == 0, "each thread loads whole float4 of both slabs");
static_assert(NT % 32 == 0 && NT <= 1024, "block size");

#include "common/sgemm_slab.cuh"   // load_slab: this thread's float4 share of the A and B slabs

extern "C" __global__ void __launch_bounds__(NT, 2)
sgemm_vectorized(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K)
{
    __shared__ __align__(16) float As[AS_SIZE];
    __shared__ __align__(16) float Bs[BK * BN];
    const int tid = threadIdx.x;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int tcol = (tid % (BN / TN)) * TN;
    const int trow = (tid / (BN / TN)) * TM;
    const bool full = bm + BM <= M && bn + BN <= N;
    const bool vec_ok = (K % 4 == 0) && (N % 4 == 0) &&
                        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) % 16 == 0);

    float acc[TM][TN] = {{0.f}};
    float4 ra[A_VECS], rb[B_VECS];
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_slab(A, B, M, N, K, bm, bn, k0, full && vec_ok && k0 + BK <= K, ra, rb);
#pragma unroll
        for (int j = 0; j < A_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
#if TRANSPOSE_A
            As[(c + 0) * (BM + APAD) + r] = ra[j].x;     // column r of rows c..c+3 of As[k][m]
            As[(c + 1) * (BM + APAD) + r] = ra[j].y;
            As[(c + 2) * (BM + APAD) + r] = ra[j].z;
            As[(c + 3) * (BM + APAD) + r] = ra[j].w;
#else
            *reinterpret_cast<float4*>(&As[r * BK + c]) = ra[j];
#endif
        }
#pragma unroll
        for (int j = 0; j < B_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[r * BN + c]) = rb[j];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#if TRANSPOSE_A
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[k * (BM + APAD) + trow + i]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#else
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[(trow + i) * BK + k];
#endif
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[k * BN + tcol + j]);
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    const bool vec_store = full && (N % 4 == 0) && (reinterpret_cast<unsigned long long>(C) % 16 == 0);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = bm + trow + i;
        float* c = C + (long long)gm * N + bn + tcol;
        if (vec_store) {
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                *reinterpret_cast<float4*>(c + j) = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            }
        } else if (gm < M) {
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                if (bn + tcol + j < N) c[j] = acc[i][j];
            }
        }
    }
}
