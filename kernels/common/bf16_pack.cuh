// bf16 <-> fp32 for packed registers. Introduced in chapter 03 (the 128-bit add kernels); chapter 04's row
// kernels reuse it.
//
// A bf16 is the top half of an fp32 (same sign and exponent, 7 of the 23 mantissa bits), so decoding one is
// exact and costs a shift or a mask, with no conversion instruction. Two bf16 share a 32-bit word, the one
// at the lower address in the low half, and a 16-byte uint4 holds eight. Encoding rounds to nearest even
// with __floats2bfloat162_rn: two floats into one word with a single cvt.rn.bf16x2.f32 on sm_80 and later.
#pragma once
#include <cuda_bf16.h>

// one word -> 2 floats: f[0] from the low half (the lower address), f[1] from the high half
__device__ __forceinline__ void unpack2(unsigned int v, float* f)
{
    f[0] = __uint_as_float(v << 16);
    f[1] = __uint_as_float(v & 0xFFFF0000u);
}

// 16 bytes (8 bf16) -> 8 floats, in address order
__device__ __forceinline__ void unpack8(const uint4 v, float f[8])
{
    unpack2(v.x, f); unpack2(v.y, f + 2); unpack2(v.z, f + 4); unpack2(v.w, f + 6);
}

// 2 floats -> one word of two bf16 (round to nearest even), lo in the low half
__device__ __forceinline__ unsigned int pack2(float lo, float hi)
{
    const __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);      // .x = lo, .y = hi
    return *reinterpret_cast<const unsigned int*>(&r);
}

// Two packed bf16 plus two more, added in fp32 and rounded back once (RNE): the correctly rounded bf16
// sums, since fp32 holds the exact sum of two bf16 to well within the rounding of the final bf16.
__device__ __forceinline__ unsigned int add_bf16x2(unsigned int a, unsigned int b)
{
    const float lo = __uint_as_float(a << 16) + __uint_as_float(b << 16);                 // decoding bf16 is exact
    const float hi = __uint_as_float(a & 0xFFFF0000u) + __uint_as_float(b & 0xFFFF0000u);
    return pack2(lo, hi);
}
