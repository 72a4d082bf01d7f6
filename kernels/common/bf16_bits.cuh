// bf16 as raw 16-bit patterns, for kernels that include no CUDA header: the element type and the one
// conversion the epilogues need. Introduced in chapter 07 (all rungs of the Hopper ladder). sm_80 on.
#pragma once

typedef unsigned short bf16_t;                               // one bf16, as its bit pattern

// Two fp32 -> one bf16x2 word, round to nearest even; `lo` lands at the lower address.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
