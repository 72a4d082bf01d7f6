// The tanh-approximated GELU in fp32. Introduced in chapter 03 (bias + GELU, unfused and fused), so that
// both versions compute bit-identical activations and differ only in their memory traffic.
//
//   gelu(u) = 0.5 u (1 + tanh(z)),  z = sqrt(2/pi) (u + 0.044715 u^3)  =  u / (1 + exp(-2z))
//
// The second form needs one fast exponential and one fast division, and has no cancellation in
// 1 + tanh(z) for negative u, so it keeps its relative accuracy where gelu is tiny.
#pragma once

// exp(-2z) = exp2(u (k0 + k1 u^2)); large |u| is safe: 1 + e overflows to inf (u / inf = -0) or rounds to 1
__device__ __forceinline__ float gelu_tanh(float u)
{
    const float k0 = -2.0f * 0.7978845608028654f * 1.4426950408889634f;   // -2 sqrt(2/pi) log2(e)
    const float k1 = k0 * 0.044715f;
    const float e = exp2f(u * fmaf(k1, u * u, k0));                         // exp(-2z)
    return __fdividef(u, 1.0f + e);   // 1 + e > 2^126 gives 0, the right limit (gelu(u) -> -0 as u -> -inf)
}
