// Chapter 05, version 1: naive SGEMM, one thread per element of C, threadIdx.x running along M.
//
//   C = A @ B        A: M x K, B: K x N, C: M x N, all fp32 row-major (leading dimensions K, N, N)
//
// Idea: the textbook triple loop with the two outer loops turned into threads. Thread (tx, ty) of
// block (bx, by) owns C[m, n] with m = by*32 + tx and n = bx*32 + ty, and walks k = 0..K-1 reading
// A[m, k] and B[k, n] straight from global memory. The grid has the conventional orientation (x along
// N, y along M); what is wrong is INSIDE the block: consecutive lanes of a warp (consecutive tx) own
// consecutive ROWS of C. So at every k a warp reads A[m..m+31, k], 32 floats K*4 bytes apart (32
// sectors for 128 useful bytes), reads one B[k, n] that all lanes share (a broadcast), and finally
// writes C[m..m+31, n], again 32 different rows. Only the L1 saves it: the 32 sectors of A are
// re-read at k+1..k+7 and mostly hit, since all 32 warps of the block walk the same 32 rows of A.
// Correct for any M, N, K >= 1: threads outside C return before the loop.
//
// Launch: grid = (ceil(N/32), ceil(M/32)), block = (32, 32) = 1024 threads, no dynamic shared memory.
//
// Prediction (4096^3: 2*M*N*K = 137.4 GFLOP; cuBLAS fp32 51.4 TFLOP/s = 2.67 ms; fp32 roof ~65
// TFLOP/s): per k a warp issues 2 loads for 32 FMAs, and its A load touches 32 cache lines: the L1
// handles about one such tag lookup per cycle, so an SM retires on the order of 1-2 FMAs per cycle
// instead of 128. That is ~0.5-1 TFLOP/s: ~1-2% of cuBLAS, about 150-300 ms per 4096^3 product.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "sgemm"):
//   naive at 4096x4096x4096: 275.6229 ms, 0.5 TFLOP/s, 0.8% of fp32, 0.01x cuBLAS fp32 (TF32 off)
//   naive at 8192x1024x4096: 139.0182 ms, 0.5 TFLOP/s, 0.8% of fp32, 0.01x cuBLAS fp32 (TF32 off)

#define BLOCK 32      // the block is BLOCK x BLOCK threads and covers a BLOCK x BLOCK tile of C

extern "C" __global__ void __launch_bounds__(BLOCK * BLOCK)
sgemm_naive(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            int M, int N, int K)
{
    const int m = blockIdx.y * BLOCK + threadIdx.x;     // threadIdx.x along M: the uncoalesced choice
    const int n = blockIdx.x * BLOCK + threadIdx.y;
    if (m >= M || n >= N) {
        return;
    }
    const float* a = A + (long long)m * K;              // 64-bit offsets: M*K may exceed 2^31
    float acc = 0.f;
    for (int k = 0; k < K; ++k) {
        acc = fmaf(a[k], B[(long long)k * N + n], acc);
    }
    C[(long long)m * N + n] = acc;
}
