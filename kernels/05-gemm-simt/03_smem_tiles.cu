// Chapter 05, version 3: shared-memory tiling: a block stages TILE x TILE slabs of A and B.
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major
//
// Idea: in version 2 every FMA needs its own load from L1/L2, although the 32 x 32 threads of a block
// read each element of A and of B 32 times between them. Here the block walks K in slabs of TILE:
// each thread loads ONE element of the A slab (TILE x TILE) and ONE of the B slab into shared memory
// (coalesced: threadIdx.x runs along the row of each slab), waits at a barrier, then does TILE FMAs
// out of shared memory, and waits again before the slab is overwritten. Global traffic drops by a
// factor TILE; shared memory now serves 2 loads per FMA. Inside the loop a warp (one ty, 32 tx)
// reads As[ty][k] (one word: a broadcast) and Bs[k][tx..tx+31] (32 consecutive words in 32 banks):
// no bank conflicts. Loads outside A or B are zero-filled, so edge tiles and a last partial slab add
// zeros; threads outside C skip the store (never return early: they must reach the barriers).
//
// Launch: grid = (ceil(N/TILE), ceil(M/TILE)), block = (TILE, TILE) = 1024 threads,
// static shared memory 2*TILE*TILE*4 = 8 KB, no dynamic shared memory.
//
// Prediction (4096^3, 137.4 GFLOP): per k a warp issues 2 shared loads (2 wavefronts of the 128-byte-
// per-cycle shared-memory pipe) for 32 FMAs, the same 16 FMAs/cycle/SM ceiling as version 2's L1
// (~8 TFLOP/s), but now every access hits and global traffic is 32x lower (2*M*N*K*4/TILE = 17 GB
// over the run, ~1 TB/s from L2 at that ceiling: comfortable). Instruction issue: ptxas merges a
// thread's As[ty][k..k+3] into one LDS.128 (SASS), so per 32 FFMA the loop issues 32 + 8 LDS:
// a third of the issue slots do math at best, before the 2 barriers per slab. Expect ~5-8 TFLOP/s,
// 10-16% of cuBLAS, ~1.5x version 2.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   smem_tiles at 4096x4096x4096: 16.5697 ms, 8.3 TFLOP/s, 12.7% of fp32, 0.16x cuBLAS fp32 (TF32 off)
//   smem_tiles at 8192x1024x4096: 7.6296 ms, 9.0 TFLOP/s, 13.8% of fp32, 0.18x cuBLAS fp32 (TF32 off)

#ifndef TILE
#define TILE 32       // BM = BN = BK = TILE; the block is TILE x TILE threads (TILE <= 32)
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
sgemm_smem_tiles(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                 int M, int N, int K)
{
    __shared__ float As[TILE][TILE];        // As[m][k]: rows of the A slab
    __shared__ float Bs[TILE][TILE];        // Bs[k][n]: rows of the B slab
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m = blockIdx.y * TILE + ty;   // this thread's element of C
    const int n = blockIdx.x * TILE + tx;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // each thread loads A[m, k0+tx] and B[k0+ty, n]; zero outside the matrices
        As[ty][tx] = (m < M && k0 + tx < K) ? A[(long long)m * K + k0 + tx] : 0.f;
        Bs[ty][tx] = (k0 + ty < K && n < N) ? B[(long long)(k0 + ty) * N + n] : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            acc = fmaf(As[ty][k], Bs[k][tx], acc);
        }
        __syncthreads();                    // before the next slab overwrites As and Bs
    }
    if (m < M && n < N) {
        C[(long long)m * N + n] = acc;
    }
}
