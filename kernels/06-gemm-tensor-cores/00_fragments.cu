// Chapter 06, version 0: the fragment layouts of mma.sync m16n8k16, tested on the tensor cores themselves.
//
// Idea: which lane holds which element of A, B and C is a table in the PTX ISA ("Matrix Fragments for
// mma.m16n8k16"). This kernel takes that table as data instead of code: lane l loads its 8 A values from
// A[a_index[8 l + i]], its 4 B values from B[b_index[4 l + i]], issues one mma.sync and stores its 4
// accumulators to C[c_index[4 l + i]] (flat, row-major indices). If the tables are the layout the
// hardware uses, C = A @ B exactly as a float64 product of the same bf16 values (K = 16: fp32 accumulation
// of 16 products is exact to ~1e-7); swap two entries of any table and C is wrong. The chapter's Python
// tables (labkit.chapters.ch06.fragment_a/b/c) are tested this way on a GPU, and the lab's explorer
// draws them.
// Shapes: A 16x16 and B 16x8 bf16 (row-major, B as k x n), C 16x8 fp32; one warp.
// Launch: grid 1, block 32 threads, no shared memory.
// Result (checked, not timed): labkit.chapters.ch06.check_fragments passes on the H200 (lab 06, section 2).
#include <cuda_bf16.h>

#include "common/mma_sm80.cuh"   // mma_bf16: one m16n8k16 mma.sync, fp32 accumulate

extern "C" __global__ void __launch_bounds__(32)
mma_fragments(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, float* __restrict__ C,
              const int* __restrict__ a_index, const int* __restrict__ b_index, const int* __restrict__ c_index)
{
    const int lane = threadIdx.x;
    unsigned a[4], b[2];
#pragma unroll
    for (int r = 0; r < 4; ++r)      // register r holds elements 2r (low half) and 2r + 1 (high half)
        a[r] = A[a_index[8 * lane + 2 * r]] | (unsigned)A[a_index[8 * lane + 2 * r + 1]] << 16;
#pragma unroll
    for (int r = 0; r < 2; ++r)
        b[r] = B[b_index[4 * lane + 2 * r]] | (unsigned)B[b_index[4 * lane + 2 * r + 1]] << 16;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    mma_bf16(d, a, b);
#pragma unroll
    for (int i = 0; i < 4; ++i) C[c_index[4 * lane + i]] = d[i];
}
