// Chapter 05, version 2: one thread per element of C, threadIdx.x running along N (coalesced).
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major
//
// Idea: the same grid, the same block and the same loop as version 1; only the two thread indices
// swap roles: m = by*32 + ty, n = bx*32 + tx. Now the 32 lanes of a warp share one row m and own 32
// consecutive columns. At every k the warp reads B[k, n..n+31], 128 contiguous bytes (one request,
// four sectors), and A[m, k], one float that all lanes share (a broadcast); the final store of C is
// 128 contiguous bytes too. Nothing is reused on purpose yet: every FMA still needs one 4-byte load
// from the memory system (L1, else L2), so the kernel is bound by load instructions, not by FMAs.
// Correct for any M, N, K >= 1: threads outside C return before the loop.
//
// Launch: grid = (ceil(N/32), ceil(M/32)), block = (32, 32) = 1024 threads, no dynamic shared memory.
//
// Prediction (4096^3, 137.4 GFLOP): per k a warp issues 2 loads (B: one 128-byte wavefront, A: one
// broadcast) for 32 FMAs. The L1 returns at most 128 bytes per cycle per SM, so an SM does at most
// 32 FMAs per 2 cycles = 16 FMAs/cycle, an eighth of its 128 lanes: a ceiling of ~8 TFLOP/s at
// 1.98 GHz. Misses to L2 (each block streams 32 columns of B and 32 rows of A through its L1) pull it
// lower (siboehm's A6000 figure scaled by SMs x clock gives ~3.4): expect ~3-6 TFLOP/s, 6-12% of
// cuBLAS, 5-10x version 1.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   coalesced at 4096x4096x4096: 23.8999 ms, 5.8 TFLOP/s, 8.8% of fp32, 0.11x cuBLAS fp32 (TF32 off)
//   coalesced at 8192x1024x4096: 10.3472 ms, 6.6 TFLOP/s, 10.2% of fp32, 0.13x cuBLAS fp32 (TF32 off)

#define BLOCK 32      // the block is BLOCK x BLOCK threads and covers a BLOCK x BLOCK tile of C

extern "C" __global__ void __launch_bounds__(BLOCK * BLOCK)
sgemm_coalesced(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                int M, int N, int K)
{
    const int m = blockIdx.y * BLOCK + threadIdx.y;
    const int n = blockIdx.x * BLOCK + threadIdx.x;     // threadIdx.x along N: consecutive lanes, consecutive columns
    if (m >= M || n >= N) {
        return;
    }
    const float* a = A + (long long)m * K;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) {
        acc = fmaf(a[k], B[(long long)k * N + n], acc);
    }
    C[(long long)m * N + n] = acc;
}
