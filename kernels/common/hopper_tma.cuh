// TMA (the Tensor Memory Accelerator): the tensor map as the kernel receives it and 2-D tile loads into
// shared memory that complete on an mbarrier, alone or multicast to the CTAs of a cluster. Introduced in
// chapter 07 (02_tma_wgmma.cu; multicast in 06_cluster_multicast.cu); rungs 02-07 use it. sm_90 on.
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "common/hopper_tma.cuh: sm_90 or later; include it only from kernel files marked // requires: sm_90a"
#endif

struct alignas(64) TmaDesc { unsigned long long w[16]; };    // a CUtensorMap made on the host

// TMA: copy the box at coordinates (c0 = column, c1 = row) of the tensor map into shared memory; the
// bytes are counted against the transaction count of `bar`. Coordinates past the tensor's end read zeros.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
// TMA multicast: one read of the box from L2, written at offset `dst` of every CTA in `mask`, each
// copy's bytes counted on the mbarrier at offset `bar` of that CTA.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1,
                                                      unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4}], [%2], %5;\n"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
                 : "memory");
}
