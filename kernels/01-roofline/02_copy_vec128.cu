// Chapter 01, version 2: the vectorised copy probe. 16 bytes per access, grid-stride, 4 loads in flight.
//
// Idea: a float4 load is one 128-bit instruction (LDG.E.128), so a warp moves 512 bytes per instruction;
// unrolling the grid-stride loop by 4 issues four independent loads before the first store, so each
// thread keeps 64 bytes in flight. The grid is sized to the GPU (a few blocks per SM), not to the data.
// Prediction: enough bytes in flight to saturate HBM: within a few percent of cudaMemcpy (cupy.copyto).
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "copy"):
//   copy_vec128 at 134217728: 0.2724 ms, 3942 GB/s, 93.7% of copy, 0.94x cupy.copyto
extern "C" __global__ void copy_vec128(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long n_vec = n / 4;                         // whole float4s; the wrapper checks alignment
    const float4* __restrict__ xv = reinterpret_cast<const float4*>(x);
    float4* __restrict__ yv = reinterpret_cast<float4*>(y);
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;

    for (; i + 3 * stride < n_vec; i += 4 * stride) {      // four independent 16-byte loads in flight
        float4 a = xv[i], b = xv[i + stride], c = xv[i + 2 * stride], d = xv[i + 3 * stride];
        yv[i] = a; yv[i + stride] = b; yv[i + 2 * stride] = c; yv[i + 3 * stride] = d;
    }
    for (; i < n_vec; i += stride) {
        yv[i] = xv[i];
    }
    // the last n % 4 floats: one thread each
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t < n - 4 * n_vec) {
        y[4 * n_vec + t] = x[4 * n_vec + t];
    }
}
