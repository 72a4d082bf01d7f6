// The 32-bit shared-memory address of a generic pointer, as cp.async, ldmatrix, mbarrier, TMA and the
// wgmma descriptors take it. Introduced in chapter 06 (02_mma_ldmatrix.cu); chapter 07 reuses it.
//
// A __shared__ object's generic address is converted with cvta.to.shared; a shared window is at most
// 228 KB, so the result fits 32 bits and the "r" operand of the PTX instructions above.
#pragma once

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
