// W bf16 per memory access: the register type of each vector width, and unpack/pack overloads for it, so
// that one templated loop body serves every width (the 16-byte fast path and its 2-byte fallback alike).
// Introduced in chapter 03 (vectorised and grid-stride elementwise kernels).
//
// A Vec<W>::T load or store is one instruction of 2W bytes (W = 8: LDG.E.128 / STG.E.128). It needs an
// address aligned to 2W bytes: the kernels or their wrappers check that before taking the vector path.
#pragma once
#include "common/bf16_pack.cuh"

template <int W> struct Vec;                                  // W bf16 moved by one access
template <> struct Vec<1> { typedef unsigned short T; };      // 2 bytes
template <> struct Vec<2> { typedef unsigned int T; };        // 4 bytes
template <> struct Vec<4> { typedef uint2 T; };               // 8 bytes
template <> struct Vec<8> { typedef uint4 T; };               // 16 bytes

// Vec<W>::T -> W floats (exact)
__device__ __forceinline__ void unpack(unsigned short v, float* f) { f[0] = __uint_as_float((unsigned int)v << 16); }
__device__ __forceinline__ void unpack(unsigned int v, float* f) { unpack2(v, f); }
__device__ __forceinline__ void unpack(uint2 v, float* f) { unpack2(v.x, f); unpack2(v.y, f + 2); }
__device__ __forceinline__ void unpack(uint4 v, float* f) { unpack8(v, f); }

// W floats -> Vec<W>::T, each rounded to nearest even
__device__ __forceinline__ void pack(const float* f, unsigned short& v)
{
    const __nv_bfloat16 r = __float2bfloat16_rn(f[0]);
    v = *reinterpret_cast<const unsigned short*>(&r);
}
__device__ __forceinline__ void pack(const float* f, unsigned int& v) { v = pack2(f[0], f[1]); }
__device__ __forceinline__ void pack(const float* f, uint2& v) { v = make_uint2(pack2(f[0], f[1]), pack2(f[2], f[3])); }
__device__ __forceinline__ void pack(const float* f, uint4& v)
{
    v = make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}
