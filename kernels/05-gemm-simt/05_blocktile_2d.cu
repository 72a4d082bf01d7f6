// Chapter 05, version 5: 2-D register blocking: each thread computes a TM x TN outer product.
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major
//
// Idea: version 4 reuses a B value TM times but still loads one A value per FMA. With a TM x TN = 8 x 8
// block of C per thread, each k loads TM values of A (a column of the thread's rows) and TN values of
// B into registers and does TM*TN = 64 FMAs with them: 16 shared loads per 64 FMAs, 0.25 per FMA
// (version 4: 1.125). The block tile grows to 128 x 128 (256 threads, 64 accumulators each) with
// BK = 8: each thread stages 4 elements of each slab per step, still with scalar, zero-filled global
// loads. Shared memory layout as before, As[m][k] and Bs[k][n]: a warp holds 2 thread-rows x 16
// thread-columns. With the k loop unrolled by 2, ptxas merges a thread's loads (SASS): As[trow+i][k..k+1]
// as one LDS.64 per row, 2 rows per warp 64 floats apart (the same banks: a 2-way conflict), and its 8
// contiguous B words as two LDS.128, 16 distinct 16-byte vectors 32 bytes apart per warp (4 wavefronts
// each). Version 6 attacks both.
//
// Launch: grid = (ceil(N/BN), ceil(M/BM)), block = (BM/TM)*(BN/TN) = 256 threads (1-D),
// static shared memory (BM*BK + BK*BN)*4 = 8 KB, no dynamic shared memory. __launch_bounds__(256, 2):
// at most 128 registers, so two blocks (16 warps) fit on an SM.
//
// Prediction (4096^3, 137.4 GFLOP): 64 accumulators + 16 operands + addresses: ~127 registers under the
// bound, 2 blocks (16 warps) per SM. Per 2 steps a warp issues 8 LDS.64 + 4 LDS.128 for 128 FFMA
// (72% of a slab's instructions are FFMA, scalar predicated global loads included), but those need
// 16 + 16 = 32 shared wavefronts per 128 warp-FFMA: with 4 warps per scheduler, the one shared pipe of
// the SM is about as busy as the FMA pipes, so it binds. Global loads overlap math only across the 2
// blocks of an SM. Expect ~25-32 TFLOP/s, 50-60% of cuBLAS, ~2x version 4.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   blocktile_2d at 4096x4096x4096: 5.0160 ms, 27.4 TFLOP/s, 42.0% of fp32, 0.54x cuBLAS fp32 (TF32 off)
//   blocktile_2d at 8192x1024x4096: 2.4884 ms, 27.6 TFLOP/s, 42.3% of fp32, 0.55x cuBLAS fp32 (TF32 off)

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
#define NT ((BM / TM) * (BN / TN))   // threads per block

static_assert(BM % TM == 0 && BN % TN == 0, "thread tile must divide the block tile");
static_assert((BM * BK) % NT == 0 && (BK * BN) % NT == 0, "each thread loads whole elements of both slabs");
static_assert(NT % 32 == 0 && NT <= 1024, "block size");

extern "C" __global__ void __launch_bounds__(NT, 2)
sgemm_blocktile_2d(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                   int M, int N, int K)
{
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int tcol = (tid % (BN / TN)) * TN;    // first column of this thread's TM x TN block
    const int trow = (tid / (BN / TN)) * TM;    // first row
    float acc[TM][TN] = {{0.f}};
    float ra[TM], rb[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int j = 0; j < BM * BK / NT; ++j) {
            const int idx = tid + j * NT, r = idx / BK, c = idx % BK;
            const int gm = bm + r, gk = k0 + c;
            As[r][c] = (gm < M && gk < K) ? A[(long long)gm * K + gk] : 0.f;
        }
#pragma unroll
        for (int j = 0; j < BK * BN / NT; ++j) {
            const int idx = tid + j * NT, r = idx / BN, c = idx % BN;
            const int gk = k0 + r, gn = bn + c;
            Bs[r][c] = (gk < K && gn < N) ? B[(long long)gk * N + gn] : 0.f;
        }
        __syncthreads();
#pragma unroll 2       // fully unrolled, ptxas hoists all 128 loads of the slab and spills at 128 registers
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) ra[i] = As[trow + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) rb[j] = Bs[k][tcol + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = bm + trow + i;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int gn = bn + tcol + j;
            if (gm < M && gn < N) {
                C[(long long)gm * N + gn] = acc[i][j];
            }
        }
    }
}
