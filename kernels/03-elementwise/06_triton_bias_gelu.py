"""Chapter 03, the compiler's alternative: bias + GELU written in Triton, the fused op in a dozen lines.

y = gelu_tanh(x + b[col]) for x, y of shape (M, N) and b of shape (N,), bf16 in and out, fp32 inside: the
operation of 05_bias_gelu_fused.cu, with the same form of GELU (u / (1 + exp(-2z)), z = sqrt(2/pi) (u +
0.044715 u^3): one exponential and one division, no cancellation for negative u). Each program owns a
tile of BLOCK_M rows x BLOCK_N columns (BLOCK_N = next_power_of_2(N), at most 1024; BLOCK_M fills the
tile to 4096 elements), loads the tile's BLOCK_N biases once and its x, computes in fp32, and stores y
once; tiles past M or N are masked. The grid is one-dimensional, row-major over the tiles, so neighbouring
programs sweep memory in order. With N a multiple of 16 (Triton specialises integer arguments that are),
every row starts 16 elements past the one before it, so Triton issues 16-byte loads and stores; 4 warps
hold 32 elements per thread. No autotuning.

    y = bias_gelu_triton(x, b)            # F.gelu(x + b, approximate="tanh") for bf16 CUDA tensors

An optional `out=` tensor of x's shape and dtype (contiguous) receives y, and is returned. The chapter's
benchmark (labkit/chapters/ch03.py) imports this file by path, as chapter 04 imports its Triton kernels,
checks it on the chapter's GELU shapes and times it beside the CUDA kernels of kernels/03-elementwise/,
eager PyTorch and torch.compile.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

ELEMENTS = 4096          # elements per program (a tile of BLOCK_M x BLOCK_N)
BLOCK_N_MAX = 1024
NUM_WARPS = 4


@triton.jit
def _bias_gelu_kernel(x_ptr, b_ptr, y_ptr, M, N, x_stride, y_stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    col_tiles = tl.cdiv(N, BLOCK_N)
    rows = (pid // col_tiles).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % col_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    mask = (rows[:, None] < M) & cmask[None, :]
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    u = x + b[None, :]
    # exp(-2z) = exp(u (c0 + c1 u^2)), c0 = -2 sqrt(2/pi), c1 = 0.044715 c0; u / inf = -0 for large negative u
    y = u / (1.0 + tl.exp(u * (-1.5957691216057308 + -0.07135481627260025 * u * u)))
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def tile(N: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) for rows of N elements: BLOCK_N a power of two from 16 to BLOCK_N_MAX covering
    the row where it can, BLOCK_M the rows that fill a tile of ELEMENTS."""
    block_n = min(BLOCK_N_MAX, max(16, triton.next_power_of_2(N)))
    return max(1, ELEMENTS // block_n), block_n


def _check(x: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if x.dim() != 2 or not x.is_cuda or not x.is_contiguous():
        raise ValueError(f"x must be a contiguous 2-D CUDA tensor, got shape {tuple(x.shape)}")
    N = x.shape[1]
    if b.dim() != 1 or b.shape[0] != N or not b.is_cuda or not b.is_contiguous() or b.dtype != x.dtype:
        raise ValueError(f"b must be a contiguous CUDA tensor of shape ({N},) and x's dtype, got shape "
                         f"{tuple(b.shape)}")
    if out is None:
        return torch.empty_like(x)
    if tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype or not out.is_cuda or not out.is_contiguous():
        raise ValueError("out must be a contiguous CUDA tensor of x's shape and dtype")
    return out


def bias_gelu_triton(x: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """gelu_tanh(x + b) for x [M, N] and b [N] (bf16 in and out, fp32 math), one Triton program per tile."""
    y = _check(x, b, out)
    M, N = x.shape
    if M == 0 or N == 0:
        return y
    block_m, block_n = tile(N)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    _bias_gelu_kernel[grid](x, b, y, M, N, x.stride(0), y.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
                            num_warps=NUM_WARPS)
    return y
