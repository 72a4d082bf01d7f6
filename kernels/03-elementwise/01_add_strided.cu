// Chapter 03, version 1: y = x + b in bf16 with a deliberately strided thread-to-element map (`strided`).
//
// Idea: the same work on the same bytes as chapter 02's naive kernel; only the map from thread to element
// changes. View the n elements as a matrix of `rows = ceil(n / stride)` rows of `stride` elements, and let
// global thread t take row t % rows and column t / rows: element (t % rows) * stride + t / rows. That is a
// transpose, a one-to-one map of [0, rows x stride) onto itself, so with rows x stride threads and a bounds
// check every element below n is computed exactly once, for any n. Neighbouring lanes of a warp have
// neighbouring rows, so their elements lie `stride` elements apart: with stride = 32 (64 bytes) the 32
// lanes of one warp load touch 32 different 32-byte sectors. stride = 1 gives back the coalesced kernel.
//
// Prediction: bytes counted = 6n, as always; FLOPs = n. Each warp load requests 32 sectors (1024 B) to
// deliver 64 useful bytes: a sector efficiency of 1/16. The other 15 elements of a sector lie in the same
// row, in the next columns, and column c + 1 is reached rows = n / 32 threads after column c; in between,
// the GPU touches one sector of x, b and y per thread, 3 x 32 B x n / 32 = 3n bytes (0.8 GB at n = 2^28),
// far beyond the 60 MiB L2. So each sector is fetched from HBM 16 times, and the partial-sector stores cost
// at least as much. Predicted: ~1/16 of copy, about 6% (~250 GB/s, ~6 ms at n = 2^28), roughly 8x slower
// than the naive kernel; lower still if DRAM serves scattered sectors less efficiently than streams.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "add_bf16"):
//   strided at 268435456: 12.1180 ms, 133 GB/s, 3.1% of copy, 0.03x torch.add
#include <cuda_bf16.h>

extern "C" __global__ void add_bf16_strided(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                            __nv_bfloat16* __restrict__ y, long long n, long long stride)
{
    const long long rows = (n + stride - 1) / stride;                      // rows of `stride` elements
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // 0 <= t < rows x stride (+ slack)
    if (t >= rows * stride) {
        return;
    }
    const long long i = (t % rows) * stride + t / rows;                    // lanes t, t+1: `stride` apart
    if (i < n) {
        y[i] = __float2bfloat16_rn(__bfloat162float(x[i]) + __bfloat162float(b[i]));
    }
}
