// The Ampere-style tensor-core path: ldmatrix fragment loads from shared memory and the bf16 mma.sync
// m16n8k16 (fp32 accumulate). Introduced in chapter 06 (02_mma_ldmatrix.cu, which explains the lane ->
// fragment map); rungs 03-07 of the chapter reuse it. sm_80 on (on Hopper it runs at about 2/3 of wgmma).
//
// ldmatrix.x4: each lane gives the address of one 16-byte row (lanes 8i..8i+7: the rows of matrix i) and
// gets one 32-bit word of each of the four 8x8 b16 matrices; .trans transposes each matrix on the way
// (B stored k-major as [k][n] becomes the "col" operand mma.sync wants).
#pragma once

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                                  unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}

// D += A * B for one m16n8k16 tile: A 16x16 row-major (4 regs), B 16x8 "col" (2 regs), D fp32 (4 regs).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
