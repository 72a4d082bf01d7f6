// Chapter 07, version 0: the wgmma roof probe (bf16 m64n256k16, fp32 accumulate, operands in shared memory).
//
// Idea: the ceiling a Hopper GEMM can reach, measured rather than read off a datasheet, as chapter 01's
// probe does for mma.sync. Each warpgroup of a block keeps one 64 x 256 fp32 accumulator (128 registers
// per thread) and issues wgmma.mma_async m64n256k16 on it from one A (64 x 64) and one B (256 x 64) tile
// in shared memory, in the 128-byte swizzle layout the GEMMs use: per round, 4 k-slices x REPEAT
// instructions in one async group, then wgmma.wait_group 0. With WARPGROUPS (2 by default) warpgroups
// per block and one block per SM, one warpgroup's wait is covered by the other's instructions; nothing
// else touches memory inside the loop, and the one store sits behind a flag that is never set, so the
// work is kept. Operand values do not matter to the rate (the tiles are zero).
// FLOPs per launch = blocks x WARPGROUPS x iters x 4 x REPEAT x 2 x 64 x 256 x 16.
// Launch: grid = SMs, block 128 x WARPGROUPS threads, dynamic shared memory SMEM_BYTES (41,984).
// requires: sm_90a
//
// Prediction: the H200's tensor cores are quoted at 989 TFLOP/s dense bf16 at the 1,830 MHz boost; at the
// 1,980 MHz it runs at under load, 132 SMs x 4,096 FLOP/clk would give 1,070. The measurements quoted
// for this GPU are 946-962 TFLOP/s for wgmma from shared memory (power and clock limits under full
// tensor load): expect ~950, 1.5x the mma.sync probe (636).
//
// Result (recorded as the wgmma_tflops ceiling in labs/results/nvidia-h200.json; lab 07, section 1, prints it).
#include "common/smem_addr.cuh"        // smem_u32
#include "common/wgmma.cuh"            // desc_sw128, wgmma_fence, wgmma_commit, wgmma_wait, fence_acc, m64n256k16
#include "common/launch_check.cuh"     // check_launch

#ifndef WARPGROUPS
#define WARPGROUPS 2
#endif
#ifndef REPEAT
#define REPEAT 4        // rounds of the 4 k-slices per async group
#endif
#define THREADS (128 * WARPGROUPS)
#define A_BYTES (64 * 64 * 2)
#define B_BYTES (256 * 64 * 2)
#define SMEM_BYTES (1024 + A_BYTES + B_BYTES)

extern "C" __global__ void __launch_bounds__(THREADS, 1)
wgmma_probe(float* out, int iters, int flag)
{
    check_launch(SMEM_BYTES, THREADS);
    extern __shared__ unsigned char smem_raw[];
    const unsigned raw = smem_u32(smem_raw);
    const unsigned base = (raw + 1023u) & ~1023u;          // swizzle atoms start on 1024-byte boundaries
    unsigned* words = reinterpret_cast<unsigned*>(smem_raw + (base - raw));
    for (int i = threadIdx.x; i < (A_BYTES + B_BYTES) / 4; i += THREADS) words[i] = 0u;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // generic-proxy writes -> wgmma reads
    __syncthreads();
    const unsigned long long dA = desc_sw128(base), dB = desc_sw128(base + A_BYTES);

    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.f;
    for (int it = 0; it < iters; ++it) {
        wgmma_fence();
#pragma unroll
        for (int r = 0; r < REPEAT; ++r)
#pragma unroll
            for (int k = 0; k < 4; ++k) wgmma_m64n256k16(acc, dA + 2 * k, dB + 2 * k);   // +32 B per k16
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(acc);
    }
    if (flag) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 128; ++i) s += acc[i];
        out[blockIdx.x * THREADS + threadIdx.x] = s;
    }
}

// FLOPs of one launch per block per iteration, and the build's block size and shared memory, for the host.
extern "C" __global__ void launch_config(long long* out)
{
    out[0] = THREADS;
    out[1] = SMEM_BYTES;
    out[2] = (long long)WARPGROUPS * 4 * REPEAT * 2 * 64 * 256 * 16;
}
