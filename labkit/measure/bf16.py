"""bf16 without a bf16 dtype: CuPy stores bf16 tensors as uint16 bit patterns; these convert them.

Works on NumPy and CuPy arrays alike (the array's own module does the arithmetic).
"""
from __future__ import annotations


def _xp(a):
    try:
        import cupy
        return cupy.get_array_module(a)
    except ImportError:
        import numpy
        return numpy


def to_bits(x):
    """float32 array -> bf16 bit patterns (uint16), rounded to nearest even; NaN stays NaN."""
    xp = _xp(x)
    f = xp.ascontiguousarray(x, dtype=xp.float32)
    u = f.view(xp.uint32)
    rounded = ((u + xp.uint32(0x7FFF) + ((u >> 16) & xp.uint32(1))) >> 16).astype(xp.uint16)
    nan = xp.isnan(f)
    return xp.where(nan, xp.uint16(0x7FC0), rounded)


def from_bits(b):
    """bf16 bit patterns (uint16) -> float32 (exact)."""
    xp = _xp(b)
    return (xp.ascontiguousarray(b).astype(xp.uint32) << 16).view(xp.float32)


def round_trip(x):
    """x rounded to bf16 and back to float32: what a bf16 tensor of x holds."""
    return from_bits(to_bits(x))


def as_torch(a):
    """A torch bf16 view (zero copy) of a CuPy uint16 array of bf16 bit patterns."""
    import cupy as cp
    import torch
    return torch.from_dlpack(a.view(cp.int16)).view(torch.bfloat16)   # int16: DLPack's surest 16-bit type
