// tile_of: the grouped (banded) order in which a persistent kernel walks the output tiles. Introduced in
// chapter 07 (05_persistent.cu); rungs 06 and 07 reuse it.
#pragma once

// Grouped tile order: tile t walks down a band of `group` tile rows before moving one tile column
// right, so the tiles in flight at one time (one per SM) share a few row blocks of A and a few
// column blocks of B, which then come from L2 instead of HBM.
__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
    const int band = group * tiles_n;
    const int first = (t / band) * group;
    const int rows = min(tiles_m - first, group);
    const int r = t - (t / band) * band;
    tm = first + r % rows;
    tn = r / rows;
}
