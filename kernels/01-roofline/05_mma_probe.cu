// Chapter 01, version 5: the bf16 tensor-core probe (mma.sync, operands in registers).
//
// Idea: the tensor-core twin of the FMA probe. Every warp keeps 8 independent accumulator tiles and
// issues `mma.sync.aligned.m16n8k16` on them back to back, from operand fragments that never leave the
// registers: no memory traffic, no shared memory, nothing but the tensor pipe. One instruction is a
// 16x8x16 product, 2 x 16 x 8 x 16 = 4096 FLOPs per warp. This is the rate every Ampere-style kernel
// (chapters 06 and 08) is bounded by; on Hopper the wider `wgmma` instructions reach further (chapter 07).
// FLOPs per launch = warps x iters x 8 x 4096.
// Prediction: on an H200 about 60-65% of the 989 TFLOP/s bf16 datasheet rate, since that rate is quoted
// for wgmma; on an A100 close to its 312 TFLOP/s, where mma.sync is the native instruction.
// Result (NVIDIA H200, 2026-12-01, labs/results/nvidia-h200.json, op "mma"):
//   mma_probe at 135168: 3.5671 ms, 635.7 TFLOP/s, 80.3% of bf16
#include "common/mma_sm80.cuh"   // mma_bf16: one bf16 m16n8k16 mma.sync, fp32 accumulate

#define MMA_CHAINS 8

extern "C" __global__ void mma_probe(float* out, int iters)
{
    // two bf16 of 2^-8 (0x3B80) per register: products stay tiny, sums never overflow
    const unsigned v = 0x3B803B80u + (threadIdx.x & 1u);
    const unsigned a[4] = {v, v, v, v};
    const unsigned b[2] = {v, v};
    float acc[MMA_CHAINS][4];
#pragma unroll
    for (int j = 0; j < MMA_CHAINS; ++j) {
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    }
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < MMA_CHAINS; ++j) {
            mma_bf16(acc[j], a, b);
        }
    }
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < MMA_CHAINS; ++j) {
        s += (acc[j][0] + acc[j][1]) + (acc[j][2] + acc[j][3]);
    }
    if (s == -1.0f) {            // never true for the inputs used; the compiler cannot know that
        out[blockIdx.x] = s;
    }
}
