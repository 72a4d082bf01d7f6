// Chapter 05, version 7: warp tiling: each warp owns a WM x WN sub-tile of the block's tile of C, and
// each thread an outer product of WMITER x WNITER small TM x TN blocks spread over the warp tile.
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major
//
// Idea: one more level of the hierarchy between the block and the thread. The 128 x 128 block tile is
// split among 8 warps as 4 x 2 warp tiles of WM x WN = 32 x 64; a warp tile is covered WMITER x WNITER
// = 2 x 2 times by a 16 x 32 "sub-tile" in which the 32 lanes form a 4 x 8 grid of TM x TN = 4 x 4
// blocks. So each thread still computes 8 x 8 = 64 results, but as 4 blocks of 4 x 4, 16 rows
// (resp. 32 columns) apart. What that buys, at step k of a slab:
//  - shared loads: lane (lm, ln) reads 4 floats of As[k][...] at lm*4 (+16) and 4 of Bs[k][...] at
//    ln*4 (+32). The 8 column-lanes read 8 consecutive float4 = 128 contiguous bytes: one wavefront
//    (version 6's layout: 4); the 4 row-lanes read 64 contiguous bytes: one wavefront. 4 LDS.128 and
//    4 wavefronts per warp per k, for 64 FFMA per thread.
//  - locality: a warp's accesses to shared memory stay inside its own 32 + 64 columns per k, and
//    its stores of C are 128-byte row segments.
//  - one more knob: WM, WN, WNITER (and with them WMITER) shape the warp tile independently of the
//    block tile; version 8's sweep tunes them.
// Loads and edges as in version 6: float4 global loads and a transposing store of A (row pitch BM +
// APAD) on the fast path, element-by-element zero-filled loads on the checked path (decided per slab),
// float4 or checked stores of C. Any M, N, K >= 1. Still one shared-memory stage: load, barrier,
// compute, barrier.
//
// Launch: grid = (ceil(N/BN), ceil(M/BM)), block = (BM/WM)*(BN/WN)*32 = 256 threads (1-D), static
// shared memory BK*(BM+APAD+BN)*4 = 16.6 KB (BK = 16), no dynamic shared memory. __launch_bounds__(256, 2).
//
// Prediction (4096^3, 137.4 GFLOP): the same FMA:LDS ratio as version 6 (64:4 per k), 2.5x fewer shared
// wavefronts, BK = 16 halves the barriers per FMA; 115 (sm_90) - 127 (sm_80) registers, 2 blocks (16
// warps) per SM.
// Still exposed: each slab's global-load latency (~1 us), overlapped only by the other block. Expect
// ~36-42 TFLOP/s, 70-82% of cuBLAS, 5-15% over version 6.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   warptile at 4096x4096x4096: 3.3546 ms, 41.0 TFLOP/s, 62.8% of fp32, 0.80x cuBLAS fp32 (TF32 off)
//   warptile at 8192x1024x4096: 1.6944 ms, 40.6 TFLOP/s, 62.1% of fp32, 0.80x cuBLAS fp32 (TF32 off)

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef WM
#define WM 32         // warp tile rows
#endif
#ifndef WN
#define WN 64         // warp tile columns
#endif
#ifndef WNITER
#define WNITER 2      // sub-tiles along N per warp tile (WMITER follows from the rest)
#endif
#ifndef TM
#define TM 4          // rows of each thread block inside a sub-tile
#endif
#ifndef TN
#define TN 4          // columns of each thread block inside a sub-tile
#endif
#ifndef APAD
#define APAD 4
#endif
#ifndef MINB
#define MINB 2        // blocks per SM asked of ptxas (__launch_bounds__): caps registers at 64K/(NT*MINB)
#endif

#define NT ((BM / WM) * (BN / WN) * 32)                // threads per block
#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))   // sub-tiles along M per warp tile
#define WSUBM (WM / WMITER)                            // sub-tile rows
#define WSUBN (WN / WNITER)                            // sub-tile columns
#define AP (BM + APAD)                                 // row pitch of As[k][m]
#define A_VECS (BM * BK / 4 / NT)                      // float4 of the A slab per thread per step
#define B_VECS (BK * BN / 4 / NT)

static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block tile");
static_assert(WMITER >= 1 && WMITER * 32 * TM * TN * WNITER == WM * WN, "a warp's 32 lanes must cover its tile");
static_assert(WM % WMITER == 0 && WN % WNITER == 0, "sub-tiles must tile the warp tile");
static_assert(WSUBM % TM == 0 && WSUBN % TN == 0 && (WSUBM / TM) * (WSUBN / TN) == 32, "32 lanes per sub-tile");
static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0 && APAD % 4 == 0, "float4 granularity");
static_assert((BM * BK / 4) % NT == 0 && (BK * BN / 4) % NT == 0, "each thread loads whole float4 of both slabs");
static_assert(NT <= 1024, "block size");

#include "common/sgemm_slab.cuh"   // load_slab: this thread's float4 share of the A and B slabs

extern "C" __global__ void __launch_bounds__(NT, MINB)
sgemm_warptile(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
               int M, int N, int K)
{
    __shared__ __align__(16) float As[BK * AP];     // As[k][m]: the A slab, transposed
    __shared__ __align__(16) float Bs[BK * BN];     // Bs[k][n]
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int wm = (warp / (BN / WN)) * WM;         // this warp's tile inside the block tile
    const int wn = (warp % (BN / WN)) * WN;
    const int lm = (lane / (WSUBN / TN)) * TM;      // this lane's block inside each sub-tile
    const int ln = (lane % (WSUBN / TN)) * TN;
    const bool full = bm + BM <= M && bn + BN <= N;
    const bool vec_ok = (K % 4 == 0) && (N % 4 == 0) &&
                        ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) % 16 == 0);

    float acc[WMITER * TM][WNITER * TN] = {{0.f}};
    float4 ra[A_VECS], rb[B_VECS];
    for (int k0 = 0; k0 < K; k0 += BK) {
        load_slab(A, B, M, N, K, bm, bn, k0, full && vec_ok && k0 + BK <= K, ra, rb);
#pragma unroll
        for (int j = 0; j < A_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BK / 4), c = (idx % (BK / 4)) * 4;
            As[(c + 0) * AP + r] = ra[j].x;
            As[(c + 1) * AP + r] = ra[j].y;
            As[(c + 2) * AP + r] = ra[j].z;
            As[(c + 3) * AP + r] = ra[j].w;
        }
#pragma unroll
        for (int j = 0; j < B_VECS; ++j) {
            const int idx = tid + j * NT, r = idx / (BN / 4), c = (idx % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[r * BN + c]) = rb[j];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[WMITER * TM], b[WNITER * TN];
#pragma unroll
            for (int im = 0; im < WMITER; ++im)
#pragma unroll
                for (int i = 0; i < TM; i += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(&As[k * AP + wm + im * WSUBM + lm + i]);
                    a[im * TM + i] = v.x; a[im * TM + i + 1] = v.y; a[im * TM + i + 2] = v.z; a[im * TM + i + 3] = v.w;
                }
#pragma unroll
            for (int in = 0; in < WNITER; ++in)
#pragma unroll
                for (int j = 0; j < TN; j += 4) {
                    const float4 v = *reinterpret_cast<const float4*>(&Bs[k * BN + wn + in * WSUBN + ln + j]);
                    b[in * TN + j] = v.x; b[in * TN + j + 1] = v.y; b[in * TN + j + 2] = v.z; b[in * TN + j + 3] = v.w;
                }
#pragma unroll
            for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
                for (int j = 0; j < WNITER * TN; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    const bool vec_store = full && (N % 4 == 0) && (reinterpret_cast<unsigned long long>(C) % 16 == 0);
#pragma unroll
    for (int im = 0; im < WMITER; ++im)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int gm = bm + wm + im * WSUBM + lm + i;
#pragma unroll
            for (int in = 0; in < WNITER; ++in) {
                const int gn = bn + wn + in * WSUBN + ln;
                const float* v = &acc[im * TM + i][in * TN];
                float* c = C + (long long)gm * N + gn;
                if (vec_store) {
#pragma unroll
                    for (int j = 0; j < TN; j += 4) {
                        *reinterpret_cast<float4*>(c + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
                    }
                } else if (gm < M) {
#pragma unroll
                    for (int j = 0; j < TN; ++j) {
                        if (gn + j < N) c[j] = v[j];
                    }
                }
            }
        }
}
