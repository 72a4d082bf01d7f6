// Chapter 01, version 3: the vector copy with one float4 per thread and a grid that covers the data.
//
// Idea: the test of a hypothesis from version 2's miss. Version 2 keeps four loads in flight per thread, a
// grid-stride apart, so the GPU reads four far-apart regions of the source at once. Here thread t copies
// vector t and nothing else: ceil((n / 4) / 256) blocks of 256 threads, each block one contiguous 4 KiB, so
// the blocks in flight sweep a single front through each buffer. The last n % 4 floats are copied one per
// thread by the first threads of the grid, as before.
// Prediction: bytes in flight per SM fall from 128 KiB to 32 KiB, still 2.6 times the 12.4 KiB that
// Little's law asks for (chapter 01's table of bytes in flight, 1 : 1 traffic), so the loads still cover
// the latency. If the scattered fronts cost version 2 its last percent, this version recovers them: at
// least 97% of cupy.copyto. If instead the per-block cost of 2^25 / 256 = 131,072 short-lived blocks
// dominates, it lands below version 2.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "copy"):
//   copy_vec128_flat at 134217728: 0.2535 ms, 4235 GB/s, 100.7% of copy, 1.01x cupy.copyto
extern "C" __global__ void copy_vec128_flat(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    const long long n_vec = n / 4;                         // whole float4s; the wrapper checks alignment
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t < n_vec) {
        reinterpret_cast<float4*>(y)[t] = reinterpret_cast<const float4*>(x)[t];
    }
    if (t < n - 4 * n_vec) {                               // the tail: at most 3 floats
        y[4 * n_vec + t] = x[4 * n_vec + t];
    }
}
