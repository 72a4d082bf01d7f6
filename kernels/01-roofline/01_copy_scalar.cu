// Chapter 01, version 1: the scalar copy probe. One float (4 bytes) per thread.
//
// Idea: the simplest kernel that moves bytes: each thread reads one float and writes it back elsewhere.
// Bytes moved: 4 read + 4 written per element; no arithmetic, so the time is all memory traffic.
// Prediction: each warp instruction moves only 128 bytes, and each thread has a single load in flight,
// so the SMs hold too few bytes in flight to cover DRAM latency (Little's law, loads only: at most 2048
// threads x 4 B = 8 KiB of loads per SM, against the 12.4 KiB per SM of chapter 01's table of bytes in
// flight, a cap of 8 / 12.4 = 65% of 4.8 TB/s, about three quarters of the copy); expect well under the
// library copy (cudaMemcpy): about two thirds of it on an H200.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "copy"):
//   copy_scalar at 134217728: 0.4008 ms, 2679 GB/s, 63.7% of copy, 0.64x cupy.copyto
extern "C" __global__ void copy_scalar(const float* __restrict__ x, float* __restrict__ y, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;  // 64-bit: n may exceed 2^31
    if (i < n) {
        y[i] = x[i];
    }
}
