// exp for softmax as one hardware instruction, and the constants around it. Introduced in chapter 04
// (softmax); the attention chapters reuse it.
//
// exp(x) = 2^(x log2 e), and 2^z is a single MUFU.EX2 (ex2.approx: about 2 ulp of fp32, far finer than a
// bf16 result shows). Written as inline PTX so that no -use_fast_math is needed and the result is the
// same whatever options a lab compiles with.
#pragma once

#define LOG2E 1.4426950408889634f
#define NEG_INF __uint_as_float(0xff800000u)   // -inf (NVRTC has no math.h INFINITY): the identity of max

__device__ __forceinline__ float fast_exp2(float z)   // 2^z; -inf -> 0, NaN -> NaN
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(z));
    return r;
}
