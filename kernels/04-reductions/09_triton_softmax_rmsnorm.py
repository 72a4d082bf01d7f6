"""Chapter 04, the user's alternative: softmax and RMSNorm written in Triton, one program per row.

These are the plain Triton kernels a PyTorch user would write first (the shape of Triton's own fused-softmax
and layer-norm tutorials): each program loads one whole row into registers as a block of
BLOCK = next_power_of_2(N) elements (masked past N; at least 16), computes in fp32, and stores the row
once. num_warps grows with the row: min(max(BLOCK // 512, 4), 16), i.e. 16 elements per thread from
N = 2048 to 8192 (8 warps at N = 4096), the setting at which these kernels come within a few percent of
the copy bandwidth on an H200 (the older tutorial's softmax thresholds, 16 warps from N = 4096, i.e. 8
elements per thread, ran well below that at N = 4096). There is no persistent loop, no autotuning and no
chunking, so a row must fit in the registers of one program: at N = 32768 each thread holds 64 fp32
values, and the kernels slow down.

    y = softmax_triton(x)                 # torch.softmax(x, -1) for a 2-D bf16 CUDA tensor
    y = rmsnorm_triton(x, w, eps=1e-6)    # x * rsqrt(mean(x^2, -1) + eps) * w

Both take an optional `out=` tensor of x's shape and dtype (contiguous) and return it. The chapter's
benchmark (labkit/chapters/ch04.py) imports this file by path and times it beside the CUDA kernels of
kernels/04-reductions/ and the torch functions.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)          # a fully -inf row gives NaN, as torch.softmax does
    num = tl.exp(z)
    den = tl.sum(num, axis=0)
    tl.store(y_ptr + row * y_stride + cols, (num / den).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_stride, y_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _block(n_cols: int) -> int:
    return max(16, triton.next_power_of_2(n_cols))


def _num_warps(block: int) -> int:
    return min(max(block // 512, 4), 16)


def _check(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if x.dim() != 2 or not x.is_cuda or not x.is_contiguous():
        raise ValueError(f"x must be a contiguous 2-D CUDA tensor, got shape {tuple(x.shape)}")
    if out is None:
        return torch.empty_like(x)
    if out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous():
        raise ValueError("out must be a contiguous tensor of x's shape and dtype")
    return out


def softmax_triton(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor (bf16 in and out, fp32 math), one Triton program per row."""
    y = _check(x, out)
    M, N = x.shape
    if M == 0 or N == 0:
        return y
    block = _block(N)
    _softmax_kernel[(M,)](x, y, N, x.stride(0), y.stride(0), BLOCK=block, num_warps=_num_warps(block))
    return y


def rmsnorm_triton(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, out: torch.Tensor | None = None) -> torch.Tensor:
    """Row-wise RMSNorm of a 2-D tensor with weight w[N] (bf16 in and out, fp32 math), one program per row."""
    y = _check(x, out)
    M, N = x.shape
    if w.shape != (N,) or not w.is_contiguous():
        raise ValueError(f"w must be a contiguous tensor of shape ({N},), got {tuple(w.shape)}")
    if M == 0 or N == 0:
        return y
    block = _block(N)
    _rmsnorm_kernel[(M,)](x, w, y, N, x.stride(0), y.stride(0), eps, BLOCK=block, num_warps=_num_warps(block))
    return y
