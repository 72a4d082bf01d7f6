"""Checking a kernel's output: poisoned, canary-padded buffers and a comparison that names the element.

- `GuardedOutput` allocates the output inside a larger buffer: the output itself is filled with a NaN
  whose payload no arithmetic produces (so an element never written is caught), and 64 KiB on each side
  hold a canary pattern (so a write past either end is caught: CuPy's memory pool rounds allocations up,
  so such writes would otherwise land silently in its slack).
- `compare` checks against a reference (NumPy on the host, CuPy on the GPU) with tolerances suited to the
  dtype and reports the first bad element as text that is the same on every run (notebook verdicts are
  compared by nbval). The chapters and the grader's worker use the same two.
- `expect` validates arrays handed to a kernel wrapper: dtype, shape, contiguity, alignment.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import KernelInputError
from . import bf16

PAD_BYTES = 64 << 10      # canary bytes on each side of an output
# bit patterns: a quiet NaN with a payload that arithmetic never yields, and a canary (also a NaN)
POISON = {2: 0x7FA1, 4: 0x7FA1B2C3, 8: 0x7FF1B2C3D4E5F607}
CANARY = {2: 0x7FA5, 4: 0x7FA5A5A5, 8: 0x7FF5A5A5A5A5A5A5}
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}

# relative tolerance by the dtype the output is stored in; atol is rtol x the reference's RMS
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


class GuardedOutput:
    """An output array of `shape` and `dtype` (numpy dtype; use 'bfloat16' for bf16 stored as uint16).

    The output sits inside one allocation between two canary regions of `pad_bytes` each (64 KiB by
    default: a stray write well past either end is caught, not only the first bytes). With `offset` > 0 the
    output starts `offset` elements past the 16-byte-aligned start, the skipped elements holding the canary
    too (a misaligned output, and a write there is a write before the output).
    """

    def __init__(self, shape, dtype="float32", offset: int = 0, pad_bytes: int = PAD_BYTES):
        import cupy as cp
        self.dtype_name = str(dtype)
        self.store = np.dtype(np.uint16 if self.dtype_name == "bfloat16" else dtype)
        self.shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        self.size = int(np.prod(self.shape, dtype=np.int64))
        w = self.store.itemsize
        self.pad = pad_bytes // w + int(offset)
        self.tail = pad_bytes // w
        u = UINT[w]
        self._raw = cp.empty(self.pad + self.size + self.tail, dtype=u)
        self._raw.fill(u(CANARY[w]))
        self._raw[self.pad:self.pad + self.size].fill(u(POISON[w]))
        self.array = self._raw[self.pad:self.pad + self.size].view(self.store).reshape(self.shape)

    def problems(self) -> list[str]:
        """Empty if every element was written and both canaries are intact; else what went wrong."""
        import cupy as cp
        w = self.store.itemsize
        u = UINT[w]
        out = []
        before = self._raw[:self.pad] != u(CANARY[w])
        after = self._raw[self.pad + self.size:] != u(CANARY[w])
        if bool(before.any()):
            k = self.pad - int(cp.flatnonzero(before)[0])
            out.append(f"wrote before the start of the output ({k} elements before element 0)")
        if bool(after.any()):
            idx = cp.flatnonzero(after)
            k, last = int(idx[0]), int(idx[-1])
            out.append(f"wrote past the end of the output (element {self.size + k}, {k + 1} past the last "
                       f"of {self.size})" + (f"; the farthest write {last + 1} past" if last > k else ""))
        unwritten = self._raw[self.pad:self.pad + self.size] == u(POISON[w])
        if bool(unwritten.any()):
            idx = cp.flatnonzero(unwritten)
            i = int(idx[0])
            out.append(f"{int(idx.size)} of {self.size} output elements never written; first: "
                       f"{_index(i, self.shape)}")
        return out

    def poison(self) -> None:
        """Fill the output with the poison again (before a timed launch whose values are checked)."""
        w = self.store.itemsize
        self._raw[self.pad:self.pad + self.size].fill(UINT[w](POISON[w]))

    def values(self, xp=np):
        """The output as float64 (bf16 decoded): on the host (NumPy) by default, or on the GPU (xp=cupy)."""
        a = self.array
        if self.dtype_name == "bfloat16":
            a = bf16.from_bits(a)
        if xp is np:
            return a.get().astype(np.float64)
        return a.astype(xp.float64)


def _index(flat: int, shape) -> str:
    if len(shape) <= 1:
        return f"[{flat}]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def _fmt(v: float) -> str:
    return f"{v:.6g}"


@dataclasses.dataclass
class Mismatch:
    count: int
    total: int
    first: str
    expected: float
    got: float

    def __str__(self):
        return (f"{self.count} of {self.total} elements wrong; first at {self.first}: "
                f"expected {_fmt(self.expected)}, got {_fmt(self.got)}")


CHUNK = 1 << 26     # elements compared at a time on the GPU


def compare(got, ref, dtype: str = "float32", rtol: float | None = None, atol: float | None = None, shape=None):
    """None if `got` matches `ref`, else a Mismatch naming the first bad element (as an index of `shape`
    when given). Both NumPy arrays (compared on the host) or both CuPy arrays (compared on the GPU, in
    chunks, so that outputs of billions of elements fit); float64 where they are, else their own dtype.

    Tolerance: |got - ref| <= atol + rtol |ref|, with rtol from TOLERANCE[dtype] and atol = rtol x RMS(ref)
    unless given. NaN must meet NaN and an infinity the same infinity.
    """
    xp = _array_module(got, ref)
    got = xp.asarray(got).reshape(-1)
    ref = xp.asarray(ref).reshape(-1)
    if xp is np:
        got, ref = got.astype(np.float64), ref.astype(np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"shape mismatch: got {got.shape[0]} elements, reference {ref.shape[0]}")
    n = ref.size
    rtol = TOLERANCE[dtype] if rtol is None else rtol
    if atol is None:
        sq, finite = 0.0, 0
        for s in range(0, n, CHUNK):
            r = ref[s:s + CHUNK]
            fin = xp.isfinite(r)
            finite += int(fin.sum())
            v = xp.where(fin, r, 0).astype(xp.float64)
            sq += float((v * v).sum())
        atol = rtol * (float(np.sqrt(sq / finite)) if finite else 1.0)
    count, first = 0, None
    with np.errstate(invalid="ignore"):
        for s in range(0, n, CHUNK):
            r, g = ref[s:s + CHUNK], got[s:s + CHUNK]
            ok = xp.where(xp.isfinite(r), xp.abs(g - r) <= atol + rtol * xp.abs(r),
                          (xp.isnan(r) & xp.isnan(g)) | (g == r))
            bad = ~ok
            c = int(bad.sum())
            if c and first is None:
                first = s + int(xp.argmax(bad))
            count += c
    if not count:
        return None
    return Mismatch(count, n, _index(first, tuple(shape) if shape is not None else (n,)),
                    float(ref[first]), float(got[first]))


def _array_module(*arrays):
    if all(isinstance(a, np.ndarray) or np.isscalar(a) for a in arrays):
        return np
    import cupy
    return cupy


def expect(name: str, a, *, dtype=None, shape=None, ndim=None, align: int = 16, contiguous: bool = True):
    """Raise KernelInputError naming `name` and what is wrong with it, else return `a`."""
    import cupy as cp
    if not isinstance(a, cp.ndarray):
        raise KernelInputError(f"{name} must be a CuPy array on the GPU, got {type(a).__name__}")
    if dtype is not None and np.dtype(a.dtype) != np.dtype(dtype):
        raise KernelInputError(f"{name} has dtype {a.dtype}, expected {np.dtype(dtype)}"
                               + (" (bf16 is stored as uint16 bit patterns: see labkit.bf16)"
                                  if np.dtype(dtype) == np.uint16 else ""))
    if ndim is not None and a.ndim != ndim:
        raise KernelInputError(f"{name} has {a.ndim} dimensions {a.shape}, expected {ndim}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise KernelInputError(f"{name} has shape {tuple(a.shape)}, expected {tuple(shape)}")
    if contiguous and not a.flags.c_contiguous:
        raise KernelInputError(f"{name} is not contiguous (strides {a.strides}); pass cupy.ascontiguousarray({name})")
    if align and a.data.ptr % align:
        raise KernelInputError(f"{name} starts at an address that is not {align}-byte aligned "
                               f"(address % {align} = {a.data.ptr % align}); this kernel needs aligned input")
    return a


def expect_threads(threads, most: int = 1024):
    """Raise KernelInputError unless `threads` (per block) is an integer from 1 to `most`."""
    if not isinstance(threads, (int, np.integer)) or not 1 <= threads <= most:
        raise KernelInputError(f"threads must be an integer from 1 to {most}, got {threads!r}")
