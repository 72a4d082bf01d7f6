"""TMA tensor maps (Hopper's `CUtensorMap`) for 2-D bf16 CuPy arrays, with errors that say what is wrong.

A tensor map is 128 opaque bytes that the driver's `cuTensorMapEncodeTiled` fills in: the global address,
sizes and strides of a tensor, the box one TMA copy moves, the shared-memory swizzle and what
out-of-bounds elements read as (zero). A kernel takes it by value as a `const __grid_constant__` parameter
(kernels/common/hopper_tma.cuh: `struct alignas(64) TmaDesc { unsigned long long w[16]; }`); from Python it
is passed as a NumPy structured scalar of 16 uint64, which CuPy copies into the parameter buffer.

The driver entry point is called through ctypes on libcuda, which every CUDA machine has (no extra
package). The checks below repeat the driver's own rules (CUDA driver API, cuTensorMapEncodeTiled), so a
bad argument is named here instead of coming back as CUDA_ERROR_INVALID_VALUE.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from ..errors import KernelInputError

TMAP_DTYPE = np.dtype([("w", np.uint64, (16,))])

# CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion (cuda.h)
BFLOAT16 = 9
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}          # bytes of the swizzle span -> enum
L2_PROMOTION_256B = 3


@functools.lru_cache(maxsize=1)
def _encode():
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        raise KernelInputError("tensor maps need the CUDA driver (libcuda), which this machine does not have")
    f = lib.cuTensorMapEncodeTiled
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                  ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    f.restype = ctypes.c_int
    return f


def check_tensor_map_args(shape, strides_bytes, itemsize: int, ptr: int, box_rows: int, box_cols: int,
                          swizzle: int) -> None:
    """KernelInputError naming the first rule of cuTensorMapEncodeTiled that the arguments break."""
    rows, cols = shape
    if itemsize != 2:
        raise KernelInputError(f"tensor map: bf16 (2-byte) elements expected, got {itemsize}-byte ones")
    if ptr % 16:
        raise KernelInputError(f"tensor map: the array starts at {ptr:#x}, which is not 16-byte aligned "
                               "(TMA needs 16-byte aligned global addresses)")
    if strides_bytes[1] != itemsize:
        raise KernelInputError("tensor map: the rows must be contiguous (the inner stride must be one element)")
    row_stride = strides_bytes[0]
    if row_stride % 16:
        raise KernelInputError(f"tensor map: the row stride is {row_stride} bytes, not a multiple of 16 "
                               f"({cols} bf16 per row: pad the rows to a multiple of 8 elements)")
    if row_stride >= 1 << 40:
        raise KernelInputError(f"tensor map: row stride {row_stride} bytes is 2^40 or more")
    if not (1 <= rows < 1 << 32 and 1 <= cols < 1 << 32):
        raise KernelInputError(f"tensor map: sizes must be 1 .. 2^32 - 1, got {rows} x {cols}")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise KernelInputError(f"tensor map: each box dimension must be 1 .. 256, got {box_rows} x {box_cols}")
    if (box_cols * itemsize) % 16:
        raise KernelInputError(f"tensor map: the box's inner size is {box_cols * itemsize} bytes, not a "
                               "multiple of 16")
    if swizzle not in SWIZZLE:
        raise KernelInputError(f"tensor map: swizzle must be one of 0, 32, 64, 128 bytes, got {swizzle}")
    if swizzle and box_cols * itemsize > swizzle:
        raise KernelInputError(f"tensor map: with a {swizzle}-byte swizzle the box's inner size may be at most "
                               f"{swizzle} bytes ({swizzle // itemsize} bf16), got {box_cols * itemsize}")


def tensor_map(a, box_rows: int, box_cols: int = 64, swizzle: int = 128):
    """The tensor map of a 2-D bf16 CuPy array `a` (uint16 bit patterns, rows contiguous): boxes of
    `box_rows` x `box_cols` elements land in shared memory in the `swizzle`-byte swizzle layout, and
    elements outside the array read as zero. Returns a NumPy structured scalar (TMAP_DTYPE) to pass as a
    kernel argument. The map holds `a`'s address: keep `a` alive while kernels use it."""
    if getattr(a, "ndim", None) != 2:
        raise KernelInputError(f"tensor map: a 2-D array expected, got shape {getattr(a, 'shape', None)}")
    if a.dtype != np.uint16:
        raise KernelInputError(f"tensor map: bf16 data (uint16 bit patterns) expected, got dtype {a.dtype}")
    rows, cols = a.shape
    ptr = int(a.data.ptr)
    check_tensor_map_args((rows, cols), a.strides, a.itemsize, ptr, box_rows, box_cols, swizzle)
    raw = np.zeros(24, dtype=np.uint64)                     # CUtensorMap is 64-byte aligned in cuda.h
    skip = (-raw.ctypes.data % 64) // 8
    dims = (ctypes.c_uint64 * 2)(cols, rows)                # innermost first
    strides = (ctypes.c_uint64 * 1)(a.strides[0])           # bytes, for every dimension but the innermost
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    elem = (ctypes.c_uint32 * 2)(1, 1)
    rc = _encode()(raw.ctypes.data + 8 * skip, BFLOAT16, 2, ptr, dims, strides, box, elem, 0, SWIZZLE[swizzle],
                   L2_PROMOTION_256B, 0)
    if rc != 0:
        raise KernelInputError(f"cuTensorMapEncodeTiled refused a {rows} x {cols} bf16 array with a "
                               f"{box_rows} x {box_cols} box and a {swizzle}-byte swizzle (CUresult {rc})")
    out = np.zeros(1, dtype=TMAP_DTYPE)
    out["w"][0] = raw[skip:skip + 16]
    return out[0]
