// Chapter 03, version 1: y = x + b in bf16 with a deliberately strided thread-to-element map (`strided`).
//
// Idea: the same work on the same bytes as chapter 02's naive kernel; only the map from thread to element
// changes. View the n elements as a matrix of `rows = ceil(n / stride)` rows of `stride` elements (row-major)
// and launch a 2-D grid: blockIdx.y is the column c (0 <= c < stride), blockIdx.x * blockDim.x + threadIdx.x
// the row r, and the thread takes element r * stride + c. Every element below n is computed exactly once,
// for any n, and the map costs one 64-bit multiply-add: no division, no modulo. (Taking row and column from
// a 1-D thread index instead needs a 64-bit division and a modulo per thread, dozens of instructions that
// the naive kernel does not have, and stride 1 would no longer be the naive kernel.) Neighbouring lanes of
// a warp have neighbouring rows, so their elements lie `stride` elements apart: with stride = 32 (64 bytes)
// the 32 lanes of one warp load touch 32 different 32-byte sectors. With stride = 1 the grid is
// (ceil(n / 256), 1) and the kernel is the naive kernel plus that multiply-add. The wrapper allows strides
// up to 65535 (the largest gridDim.y).
//
// Prediction: bytes counted = 6n, as always; FLOPs = n. Stride 1: the naive kernel's time, within a few
// percent. Stride >= 16: each warp load requests 32 sectors (1024 B) to deliver 64 useful bytes, a sector
// efficiency of 1/16. Blocks start in the order of their linear index, x fastest (CUDA does not promise it;
// the hardware does it), so the GPU sweeps column 0 down all the rows, then column 1, and so on. The other
// 15 elements of a sector (columns c + 1 .. c + 15 of the same row) are used one to fifteen sweeps later,
// and between two uses the GPU touches one element of x, b and y in every row: 3n / stride elements.
// Whether a sector survives in the L2 until its next use depends on the L2's lines, not on its bytes.
// Assumed: the L2 keeps 128-byte lines of four 32-byte sectors, a line takes its whole 128 bytes of
// capacity whichever of its sectors are filled, and each line is held once. From stride 64 on, the row pitch
// is at least 128 bytes, so every element of a sweep lies in a line of its own: a sweep occupies 3n / stride
// lines, each with one useful sector, and a full L2 then holds only a quarter of its capacity in useful
// data. The H200's 60 MiB (62,914,560 B, gpu.l2_bytes in the results file) are 491,520 lines, so a sweep
// fits once 3n / stride <= 491,520, i.e. stride >= n / 163,840. For n = 2^26 (the lab's sweep and the
// recorded stride sweep) that is stride 512 (393,216 lines, 80% of the L2) and, with room to spare, 1024;
// for n = 2^28, 2048. Counting useful bytes against the whole 60 MiB would put the recovery four times
// earlier, at stride 128 for n = 2^26.
// So, for n = 2^26: stride 16 near the no-reuse bound of 1/16 of copy (each warp's 32 sectors are 1 KiB
// of consecutive bytes, which DRAM streams well); strides 32 to 256 below it, falling as a warp's 32
// sectors spread from 8 lines (stride 16) over 16 (stride 32) to 32 (stride 64 on): DRAM serves scattered
// sectors worse than whole lines, and may fetch more than one sector per miss; stride 512 part of the way
// back (the L2 80% full of the sweep, with an imperfect replacement policy and two L2 partitions); 1024 and
// beyond most of the way back, though not to the naive kernel: DRAM traffic falls towards one pass, but L1
// and L2 still handle 16 sector requests per 64 useful bytes. The ladder's record, stride 32 at n = 2^28,
// fits nowhere near: at most 1/16 of copy, about 6% (~250 GB/s, ~6 ms), roughly 8x slower than the naive
// kernel, and lower still for the reasons above.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "add_bf16"):
//   strided at 268435456: 12.3096 ms, 131 GB/s, 3.1% of copy, 0.03x torch.add
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "add_bf16_stride"):
//   stride_0001 at 67108864: 0.1990 ms, 2023 GB/s, 48.3% of copy, 0.97x naive (chapter 02), same n
//   stride_0016 at 67108864: 1.9230 ms, 209 GB/s, 5.0% of copy, 0.10x naive (chapter 02), same n
//   stride_0032 at 67108864: 3.0834 ms, 131 GB/s, 3.1% of copy, 0.06x naive (chapter 02), same n
//   stride_0064 at 67108864: 4.0837 ms, 99 GB/s, 2.4% of copy, 0.05x naive (chapter 02), same n
//   stride_0128 at 67108864: 6.4192 ms, 63 GB/s, 1.5% of copy, 0.03x naive (chapter 02), same n
//   stride_0256 at 67108864: 6.6270 ms, 61 GB/s, 1.5% of copy, 0.03x naive (chapter 02), same n
//   stride_0512 at 67108864: 4.2739 ms, 94 GB/s, 2.2% of copy, 0.04x naive (chapter 02), same n
//   stride_1024 at 67108864: 1.8412 ms, 219 GB/s, 5.2% of copy, 0.10x naive (chapter 02), same n
//   stride_2048 at 67108864: 1.7371 ms, 232 GB/s, 5.5% of copy, 0.11x naive (chapter 02), same n
#include <cuda_bf16.h>

extern "C" __global__ void add_bf16_strided(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                                            __nv_bfloat16* __restrict__ y, long long n, long long stride)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;   // lanes: neighbouring rows
    const long long i = row * stride + blockIdx.y;                            // column blockIdx.y of the view
    if (i < n) {                                                              // also rejects rows past the last
        y[i] = __float2bfloat16_rn(__bfloat162float(x[i]) + __bfloat162float(b[i]));
    }
}
