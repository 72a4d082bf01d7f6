// The XOR swizzle of the 16-byte chunks of a shared tile (or none), chosen by the SWIZZLE macro of the
// including file. Introduced in chapter 06 (04_swizzle.cu compares it with 03's padded rows); rungs 03-07
// of the chapter use it. Include it after SWIZZLE is defined (0: padded rows, 1: swizzled).
#pragma once

#ifndef SWIZZLE
#error "common/smem_swizzle.cuh: define SWIZZLE (0 or 1) before including it"
#endif

// Where 16-byte chunk c of row r of a tile whose rows hold `chunks` chunks lands. Unswizzled: chunk c.
// Swizzled: the chunk index is XORed with bits of the row so that the 8 rows an ldmatrix reads at one
// logical chunk (and the 8 chunks a quarter-warp of cp.asyncs writes) fall in 8 different 16-byte bank
// groups. 128-byte or longer rows: c ^ (r % 8). 64-byte rows (two per 128-byte line): c ^ ((r / 2) % 4).
__device__ __forceinline__ int swz(int r, int c, int chunks)
{
#if SWIZZLE
    return chunks >= 8 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
#else
    return c;
#endif
}
