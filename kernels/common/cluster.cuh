// Thread-block clusters: this CTA's rank, the cluster's index and count, a cluster-wide barrier, and an
// arrive on the mbarrier of another CTA of the cluster. Introduced in chapter 07 (06_cluster_multicast.cu);
// rung 07 reuses it. sm_90 on.
#pragma once
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "common/cluster.cuh: sm_90 or later; include it only from kernel files marked // requires: sm_90a"
#endif

// Clusters: CTAs of one cluster run at once on SMs of one GPC and can reach each other's shared memory.
__device__ __forceinline__ unsigned cluster_ctarank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned cluster_id_x()    { unsigned r; asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned cluster_count_x() { unsigned r; asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {            // every thread of every CTA of the cluster
    asm volatile("barrier.cluster.arrive.release;\n" "barrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrive on the mbarrier at the same shared-memory offset in CTA `cta` of this cluster (itself included).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta) {
    asm volatile("{\n .reg .b32 ra;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
                 " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" :: "r"(bar), "r"(cta) : "memory");
}
