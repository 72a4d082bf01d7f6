// launch_config for the chapter 07 rungs: the build's launch geometry written out for the host, so Python
// never repeats the macro arithmetic (check_launch traps if a launch disagrees anyway). Include it at the
// end of a kernel file that defines BM, BN, BK, THREADS, SMEM_BYTES, SCHEDULE (0: one block per tile on a
// (ceil(N/BN), ceil(M/BM)) grid; 1: persistent, grid = min(tiles, SMs); 2: persistent clusters of CLUSTER
// blocks along M) and OPERANDS (0: A, B, C pointers; 1: tensor maps of A and B, C pointer; 2: tensor maps of
// A, B and C). Introduced in chapter 07.
#pragma once
#ifndef STAGES
#define LC_STAGES 1
#else
#define LC_STAGES STAGES
#endif
#ifndef CLUSTER
#define LC_CLUSTER 1
#else
#define LC_CLUSTER CLUSTER
#endif
#ifndef GROUP_M
#define LC_GROUP_M 1
#else
#define LC_GROUP_M GROUP_M
#endif

// out[0..9] = BM, BN, BK, threads, dynamic shared memory bytes, SCHEDULE, OPERANDS, stages, cluster, GROUP_M
extern "C" __global__ void launch_config(int* out)
{
    const int v[10] = {BM, BN, BK, THREADS, SMEM_BYTES, SCHEDULE, OPERANDS, LC_STAGES, LC_CLUSTER, LC_GROUP_M};
    for (int i = 0; i < 10; ++i) out[i] = v[i];
}
