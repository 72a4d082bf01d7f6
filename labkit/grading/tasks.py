"""What a graded exercise is: the task specs' shape, the registry, and the helpers specs share.

Two kinds of task:
- `KernelTask`: the learner writes one CUDA kernel with a fixed name and signature (the starter code fixes
  both); the grader launches it with a fixed configuration on the task's shapes, in a worker process,
  checks it against a float64 reference with poisoned, canary-padded outputs, then times it against
  `cupy.copyto` moving the same bytes.
- `NumericTask`: a few numbers (bytes moved, FLOP/B, occupancy) checked with a tolerance.

The specs live in one module per chapter (labkit/grading/ch01.py ...). Everything here is importable
without a GPU; the functions that build inputs or launch kernels import CuPy when they run.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import zlib
from typing import Any, Callable

CHAPTER_MODULES = ("ch01", "ch02", "ch03", "ch04")

# a shape is an int (a vector of n elements) or a tuple (rows, cols)
Shape = Any


@dataclasses.dataclass(frozen=True)
class Case:
    """One run of the learner's kernel: a shape, a layout variant, public or hidden, and its seed."""
    label: str
    shape: Shape
    variant: str | None = None
    hidden: bool = False
    role: str = "check"          # "check", or "speed": the shape that is also timed

    @property
    def seed(self) -> int:
        return zlib.crc32(f"{self.shape}|{self.variant}".encode())


@dataclasses.dataclass
class KernelTask:
    id: str                                   # "03.vec_add": chapter "03", task "vec_add"
    title: str
    kernel: str                               # the __global__ function's name
    signature: str                            # as the starter code fixes it
    source_var: str                           # the notebook variable holding the CUDA source
    shapes: list                              # public shapes, edge cases included
    inputs: Callable                          # (case, gen) -> {name: (cupy array, "f32"|"bf16")}, kernel order
    reference: Callable                       # (xp, {name: float array}, case) -> expected output (float)
    launch: Callable                          # (kernel, {name: array}, out array, case, ctx) -> None
    out_shape: Callable                       # shape -> output shape tuple
    out_dtype: str                            # "float32" or "bfloat16"
    bytes_moved: Callable                     # shape -> bytes read + written, each tensor once
    launch_text: str                          # how the grader launches the kernel, for the notebook
    speed_shape: Shape | None = None
    speed_threshold: float | None = None      # % of cupy.copyto on the same bytes; None: no speed points
    points_correct: int = 3
    points_hidden: int = 1
    points_speed: int = 2
    rtol: float | None = None                 # None: labkit.checks.TOLERANCE[out_dtype]
    atol: float | None = None
    variants: Callable = lambda shape: [None]        # layouts to test each shape in
    variant_text: dict = dataclasses.field(default_factory=dict)
    out_offset: Callable = lambda variant: 0         # output starts this many elements past 16-byte alignment

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def max_points(self) -> int:
        return self.points_correct + self.points_hidden + (self.points_speed if self.speed_threshold else 0)

    def label(self, shape, variant=None) -> str:
        base = f"n={shape}" if isinstance(shape, int) else "x".join(str(s) for s in shape)
        return base + (f" ({self.variant_text.get(variant, variant)})" if variant else "")

    def cases(self, shapes=None, hidden: bool = False, speed: bool = False) -> list[Case]:
        shapes = self.shapes if shapes is None else shapes
        out = [Case(self.label(s, v), s, v, hidden) for s in map(norm_shape, shapes) for v in self.variants(s)]
        if speed and self.speed_shape is not None:
            s = norm_shape(self.speed_shape)
            out.append(Case(self.label(s) + " (speed shape)", s, None, hidden, role="speed"))
        return out

    def elements(self, shape) -> int:
        return math.prod(self.out_shape(norm_shape(shape)))

    def case_seconds(self, shape, base: float) -> float:
        """The time limit of one case: `base` seconds, plus 2 s per GB the case moves (huge shapes)."""
        return base + 2.0 * self.bytes_moved(norm_shape(shape)) / 1e9


@dataclasses.dataclass
class Question:
    key: str
    prompt: str
    expected: float
    hint: str                       # names the part to recheck when the answer is off
    rtol: float = 0.02
    unit: str = ""


@dataclasses.dataclass
class NumericTask:
    id: str
    title: str
    answers_var: str                # the notebook variable holding the answers dict
    questions: list

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def max_points(self) -> int:
        return len(self.questions)


def norm_shape(s):
    """Shapes as the specs use them: an int, or a tuple of ints."""
    if isinstance(s, (list, tuple)):
        return tuple(int(v) for v in s)
    return int(s)


# ------------------------------------------------------------------------------------------- registry

_TASKS: dict[str, Any] = {}


def register(*tasks):
    for t in tasks:
        _TASKS[t.id] = t


def all_tasks() -> dict:
    if not _TASKS:
        for m in CHAPTER_MODULES:
            importlib.import_module(f"labkit.grading.{m}")
    return _TASKS


def get(task_id: str):
    tasks = all_tasks()
    if task_id not in tasks:
        from ..errors import LabkitError
        raise LabkitError(f"no exercise named {task_id!r}; the exercises are: {', '.join(tasks)}")
    return tasks[task_id]


def for_chapter(chapter: str) -> list:
    return [t for t in all_tasks().values() if t.chapter == chapter]


# -------------------------------------------------------------------- helpers the specs share (GPU side)

_GEN_BODY = r"""
unsigned long long z = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ull;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
z = z ^ (z >> 31);
float u1 = ((float)(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
float u2 = (float)((z >> 16) & 0xFFFFFFull) * (1.0f / 16777216.0f);
float v = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * scale + shift;
if (v == 0.0f) v = scale;
"""
_kernels: dict = {}


def _gen_kernel(kind: str):
    import cupy as cp
    if kind not in _kernels:
        if kind == "f32":
            _kernels[kind] = cp.ElementwiseKernel(
                "uint64 seed, float32 scale, float32 shift", "float32 out", _GEN_BODY + "out = v;",
                "labkit_randn_f32")
        else:  # bf16 bit patterns, rounded to nearest even
            _kernels[kind] = cp.ElementwiseKernel(
                "uint64 seed, float32 scale, float32 shift", "uint16 out", _GEN_BODY +
                "unsigned int u = __float_as_uint(v); out = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);",
                "labkit_randn_bf16")
    return _kernels[kind]


class Gen:
    """Deterministic random normal inputs on the GPU, any size (a counter-based hash, seeded per case)."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.k = 0

    def normal(self, shape, kind: str = "f32", scale: float = 1.0, shift: float = 0.0, offset: int = 0):
        """Array of `shape`; kind "f32" (float32) or "bf16" (uint16 bit patterns). offset > 0 returns a
        view starting `offset` elements into a larger allocation (a pointer that is not 16-byte aligned)."""
        import cupy as cp
        n = math.prod(shape) if isinstance(shape, tuple) else int(shape)
        dtype = cp.float32 if kind == "f32" else cp.uint16
        # 256 bytes of (random) slack after the end: a kernel that reads a little past its input reads
        # numbers, not an unmapped page (an empty input still has a valid address), so what it writes
        # past its output is what the verdict reports
        tail = 256 // cp.dtype(dtype).itemsize
        raw = cp.empty(n + offset + tail, dtype=dtype)
        self.k += 1
        _gen_kernel(kind)(cp.uint64((self.seed * 1_000_003 + self.k * 7919) % (1 << 63)),
                          cp.float32(scale), cp.float32(shift), raw)
        a = raw[offset:offset + n]
        return a.reshape(shape) if isinstance(shape, tuple) else a


def decode(array, kind: str, xp, dtype):
    """A kernel input or output as floats of `dtype` in module `xp` (numpy: copied to the host)."""
    from .. import bf16
    if kind == "bf16":
        array = bf16.from_bits(array)
    if xp.__name__ == "numpy" and hasattr(array, "get"):
        array = array.get()
    return array.astype(dtype)


def sms() -> int:
    import cupy as cp
    return cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]
