// Chapter 05, version 4: 1-D register blocking: each thread computes TM results down a column of C.
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major
//
// Idea: version 3 spends two shared-memory loads per FMA. Give each thread TM = 8 outputs
// C[m0..m0+7, n] of one column instead of one: per k it loads B[k, n] ONCE into a register and
// reuses it for 8 FMAs with As[m0+i][k], i = 0..7. Shared loads per FMA fall from 2 to (1 + TM)/TM
// = 1.125, and the block tile grows to BM x BN = 64 x 64 with BK = 8 (512 threads, each loading one
// element of the A slab and one of the B slab per step). The lanes of a warp share m0 (the 32 lanes
// are 32 consecutive columns n), so As[m0+i][k] is a broadcast and Bs[k][n] 32 consecutive words:
// no bank conflicts. Loads outside A or B are zero-filled; stores outside C are skipped.
//
// Launch: grid = (ceil(N/BN), ceil(M/BM)), block = BM*BN/TM = 512 threads (1-D),
// static shared memory (BM*BK + BK*BN)*4 = 4 KB, no dynamic shared memory. __launch_bounds__(512, 2):
// at most 64 registers, so two blocks (32 warps) fit on an SM.
//
// Prediction (4096^3, 137.4 GFLOP): with the k loop unrolled by 2, ptxas merges As[m0+i][k], [k+1]
// into one LDS.64 (SASS): per 2 steps a warp issues 8 + 2 shared loads (10 wavefronts) for 16 warp
// FFMAs (512 lane-FMAs), ~51 FMAs/cycle/SM from the shared pipe (~27 TFLOP/s), and only ~37% of a
// slab's instructions are FFMA (loads, barriers, index math: ~24 TFLOP/s). 37-40 registers: 3 blocks
// (48 warps) per SM hide the per-slab global latency only in part. Expect ~12-18 TFLOP/s, 25-35% of
// cuBLAS, ~2x version 3.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   blocktile_1d at 4096x4096x4096: 8.1272 ms, 16.9 TFLOP/s, 25.9% of fp32, 0.33x cuBLAS fp32 (TF32 off)
//   blocktile_1d at 8192x1024x4096: 4.0684 ms, 16.9 TFLOP/s, 25.9% of fp32, 0.33x cuBLAS fp32 (TF32 off)

#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8          // results per thread, down a column of the tile
#endif
#define NT (BM * BN / TM)   // threads per block

static_assert(BM % TM == 0, "TM must divide BM");
static_assert((BM * BK) % NT == 0 && (BK * BN) % NT == 0, "each thread loads whole elements of both slabs");
static_assert(NT % 32 == 0 && NT <= 1024, "block size");

extern "C" __global__ void __launch_bounds__(NT, 2)
sgemm_blocktile_1d(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                   int M, int N, int K)
{
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
    const int tcol = tid % BN;              // this thread's column of the tile
    const int trow = (tid / BN) * TM;       // and the first of its TM rows
    float acc[TM] = {0.f};
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int j = 0; j < BM * BK / NT; ++j) {        // A slab: threads run along its rows (k)
            const int idx = tid + j * NT, r = idx / BK, c = idx % BK;
            const int gm = bm + r, gk = k0 + c;
            As[r][c] = (gm < M && gk < K) ? A[(long long)gm * K + gk] : 0.f;
        }
#pragma unroll
        for (int j = 0; j < BK * BN / NT; ++j) {        // B slab: threads run along its rows (n)
            const int idx = tid + j * NT, r = idx / BN, c = idx % BN;
            const int gk = k0 + r, gn = bn + c;
            Bs[r][c] = (gk < K && gn < N) ? B[(long long)gk * N + gn] : 0.f;
        }
        __syncthreads();
#pragma unroll 2       // fully unrolled, ptxas hoists all 72 loads of the slab and spills at 64 registers
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][tcol];                // one load, reused TM times
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                acc[i] = fmaf(As[trow + i][k], b, acc[i]);
            }
        }
        __syncthreads();
    }
    const int gn = bn + tcol;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gm = bm + trow + i;
        if (gm < M && gn < N) {
            C[(long long)gm * N + gn] = acc[i];
        }
    }
}
