// Chapter 06, version 0: the mma.sync roof probe (bf16 m16n8k16, fp32 accumulate, operands in registers).
//
// Idea: the ceiling a GEMM built on mma.sync can reach, measured rather than read off a datasheet. Every
// warp issues m16n8k16 mma.sync back to back on CHAINS independent accumulators (a chain's next mma
// waits for its previous one; with 8 chains and several warps per scheduler the tensor pipe always has
// an independent mma ready). The A and B fragments never change and nothing touches memory inside the
// loop; the one store sits behind a condition that is never true, so the compiler keeps the work. On
// Hopper this is the Ampere-style path: the full Hopper rate needs wgmma (chapter 07).
// FLOPs per launch = blocks x warps per block x iters x CHAINS x 4096 (2 x 16 x 8 x 16 per mma).
// Launch: grid 4 x SMs, block 256 threads (8 warps), no shared memory.
//
// Prediction: H200 measured earlier at 621-636 TFLOP/s for this kind of loop (ANCHORS.md), about
// 2/3 of the wgmma rate (946-962); with 8 chains per warp and 8 warps per block this probe should land
// in that range: 0.59 m16n8k16 per clock per SM at ~1.98 GHz.
#ifndef CHAINS
#define CHAINS 8
#endif

extern "C" __global__ void __launch_bounds__(256) mma_probe(float* out, int iters)
{
    // Finite, thread-dependent bf16 pairs (values near 1/64): the accumulators stay far from overflow.
    const unsigned t = threadIdx.x & 7;
    const unsigned a0 = 0x3c803c80u + t, a1 = 0x3c813c81u + t, a2 = 0x3c823c82u + t, a3 = 0x3c833c83u + t;
    const unsigned b0 = 0x3c843c84u + t, b1 = 0x3c853c85u + t;
    float d[CHAINS][4];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) d[c][0] = d[c][1] = d[c][2] = d[c][3] = 0.f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) s += (d[c][0] + d[c][1]) + (d[c][2] + d[c][3]);
    if (s == -1.0f) {            // never true (every product is positive); the compiler cannot know that
        out[blockIdx.x] = s;
    }
}
