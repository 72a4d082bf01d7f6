// wgmma_tile<N>: one m64nNk16 wgmma for a tile width N of 128 or 256 chosen at compile time. Introduced
// in chapter 07 (03_tma_ring.cu, the first rung with BN = 256); rungs 03-07 use it. sm_90a only.
#pragma once
#include "common/wgmma.cuh"   // wgmma_m64n128k16, wgmma_m64n256k16

template <int N> __device__ __forceinline__ void wgmma_tile(float (&d)[N / 2], unsigned long long da, unsigned long long db) {
    if constexpr (N == 128) wgmma_m64n128k16(d, da, db);
    else if constexpr (N == 256) wgmma_m64n256k16(d, da, db);
}
