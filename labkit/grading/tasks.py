"""What a graded exercise is: the task specs' shape, the registry, and the helpers specs share.

Two kinds of task:
- `KernelTask`: the learner writes one CUDA kernel with a fixed name and signature (the starter code fixes
  both); the grader launches it with a fixed configuration on the task's shapes, in a worker process,
  checks it against a float64 reference computed from inputs the kernel never sees (before the launch),
  with poisoned outputs inside 64 KiB canary pads, checks that the inputs were left as they were, then
  times it (every timed launch re-poisoned and its output compared) against `cupy.copyto` on the same bytes,
  or, for a task with a `speed_baseline` (a library call: cuBLAS, torch), against that library run on the
  same inputs in the same worker, the threshold then being a % of the library's FLOP rate.
- `NumericTask`: a few numbers (bytes moved, FLOP/B, occupancy) checked with a tolerance.

The specs live in one module per chapter, `labkit/grading/chNN.py`, each exporting its tasks as a module
constant `TASKS = (numbers, copy_probe, ...)`. The registry finds those modules with pkgutil (adding
`labkit/grading/ch05.py` is all a new chapter needs; nothing is registered as an import side effect).

Hidden tests: a KernelTask's `hidden_shapes(rng)` returns the hidden shapes for one batch, drawn from
`rng` (a `random.Random` seeded by the instructor's seed and the task id), fixed edge cases among them.

Everything here is importable without a GPU; the functions that build inputs or launch kernels import
CuPy when they run.
"""
from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import random
import re
import struct
import zlib
from typing import Any, Callable

from .. import grading as _package
from ..errors import LabkitError
from ..measure import bf16
from ..measure.device import sm_count

# a shape is an int (a vector of n elements) or a tuple (rows, cols)
Shape = Any

_MODULE = re.compile(r"^ch\d\d$")


@dataclasses.dataclass(frozen=True)
class Case:
    """One run of the learner's kernel: a shape, a layout variant, public or hidden, and its seed.

    salt: mixed into the input seed (hidden cases use the batch's seed, so inputs change with it)."""
    label: str
    shape: Shape
    variant: str | None = None
    hidden: bool = False
    role: str = "check"          # "check", or "speed": the shape that is also timed
    salt: int = 0

    @property
    def seed(self) -> int:
        extra = f"|{self.salt}" if self.salt else ""
        return zlib.crc32(f"{self.shape}|{self.variant}{extra}".encode())


def _no_hidden(rng):
    return []


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
    speed_threshold: float | None = None      # % of the baseline's rate (below); None: no speed points
    # the speed baseline: None, cupy.copyto moving the same bytes (memory-bound tasks, "% of copy" in GB/s);
    # else (inputs {name: array}, out array, case) -> None running a library on the case's inputs into an
    # output of the task's shape (compute-bound tasks: "% of <baseline_name>" in TFLOP/s, from `flops`).
    # The worker times it beside the kernel (before and after) and checks its output like the kernel's.
    speed_baseline: Callable | None = None
    baseline_name: str = "copy"               # the verdict's name for it: "cuBLAS fp32" (no ':' or brackets)
    points_correct: int = 3
    points_hidden: int = 1
    points_speed: int = 2
    rtol: float | None = None                 # None: labkit.measure.checks.TOLERANCE[out_dtype]
    # None: rtol x the reference's RMS; a float; or (xp, {name: float array}, case) -> float, a tolerance per
    # case computed from the inputs as the reference sees them (e.g. GEMM: 4 K eps rms(A) rms(B))
    atol: float | Callable | None = None
    variants: Callable = lambda shape: [None]        # layouts to test each shape in
    variant_text: dict = dataclasses.field(default_factory=dict)
    out_offset: Callable = lambda variant: 0         # output starts this many elements past 16-byte alignment
    hidden_shapes: Callable = _no_hidden             # rng -> hidden shapes for one batch (edge cases included)
    flops: Callable = lambda shape: 0                # shape -> floating-point operations (the compute floor)
    # datasheet rates (labkit.measure.ceilings.DATASHEET keys) whose highest sets the compute floor: an fp32
    # CUDA-core task is held to the fp32 peak alone
    floor_peaks: tuple = ("fp32_tflops", "bf16_tflops")
    ref_temps: int = 4                               # output-sized temporaries the reference makes (memory)
    # the target the grader compiles the learner's source for: None, CuPy's choice for the GPU (or sm_90a when
    # the source carries `// requires: sm_90a`); "sm_90a": wgmma, setmaxnreg (Hopper only; a GPU of another
    # compute capability gets "not graded", no points): see `runs_on`
    arch: str | None = None
    # A kernel that writes more than one output (attention: O and its LSE): shape -> ((name, shape, dtype), ...),
    # each output a GuardedOutput of its own (poison, canaries), the first one the task's out_shape / out_dtype
    # (what a speed baseline writes). `launch` then gets {name: array} as its `out`, and `verify` takes the
    # place of reference / rtol / atol: (inputs {name: (cupy array, kind)}, case) -> check, called BEFORE the
    # launch (it computes the reference from the inputs as generated); check(outputs) -> None, or the text of
    # what is wrong, where outputs is {name: array}, or one array (the first output: a baseline's).
    outputs: Callable | None = None
    verify: Callable | None = None
    ref_bytes: Callable | None = None                # shape -> GPU bytes verify and check take at their peak

    @property
    def chapter(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def max_points(self) -> int:
        """Everything this task can give (public, hidden, speed); what one run can give: verdict.max_points."""
        return self.points_correct + self.points_hidden + (self.points_speed if self.speed_threshold else 0)

    def label(self, shape, variant=None) -> str:
        base = f"n={shape}" if isinstance(shape, int) else "x".join(str(s) for s in shape)
        return base + (f" ({self.variant_text.get(variant, variant)})" if variant else "")

    def cases(self, shapes=None, hidden: bool = False, speed: bool = False, salt: int = 0) -> list[Case]:
        shapes = self.shapes if shapes is None else shapes
        out = [Case(self.label(s, v), s, v, hidden, salt=salt) for s in map(norm_shape, shapes)
               for v in self.variants(s)]
        if speed and self.speed_shape is not None:
            s = norm_shape(self.speed_shape)
            out.append(Case(self.label(s) + " (speed shape)", s, None, hidden, role="speed"))
        return out

    def draw_hidden(self, seed: int) -> list:
        """The hidden shapes of a batch graded with `seed` (the same seed, the same shapes)."""
        rng = random.Random(f"{int(seed)}|{self.id}")
        return [norm_shape(s) for s in self.hidden_shapes(rng)]

    def hidden_cases(self, seed: int) -> list[Case]:
        return self.cases(self.draw_hidden(seed), hidden=True, salt=int(seed) % (1 << 31) or 1)

    def runs_on(self, compute_capability: str) -> str | None:
        """None when a GPU of `compute_capability` ("9.0") can run this task's kernels, else why not. An "a"
        target (sm_90a) runs on exactly its own compute capability; a plain one (sm_80) on it and later."""
        if not self.arch:
            return None
        digits = self.arch.removeprefix("sm_").rstrip("a")
        need = f"{digits[:-1]}.{digits[-1]}"
        have = tuple(int(v) for v in compute_capability.split("."))
        want = tuple(int(v) for v in need.split("."))
        if have == want or (not self.arch.endswith("a") and have > want):
            return None
        what = "exactly " if self.arch.endswith("a") else "at least "
        return (f"this exercise compiles for {self.arch} and needs a GPU of compute capability {what}{need}"
                + (" (Hopper: H100, H200, GH200)" if need == "9.0" else "")
                + f"; this GPU is {compute_capability}")

    def elements(self, shape) -> int:
        return math.prod(self.out_shape(norm_shape(shape)))

    def out_itemsize(self) -> int:
        return 2 if self.out_dtype == "bfloat16" else 4

    def case_seconds(self, shape, base: float) -> float:
        """The time limit of one case: `base` seconds, plus 2 s per GB the case moves (huge shapes)."""
        return base + 2.0 * self.bytes_moved(norm_shape(shape)) / 1e9


class BaselineUnavailable(Exception):
    """Raised by a task's speed_baseline that cannot run here (its library is not installed, or refuses the
    inputs on this GPU): the speed is then "not measured", with the exception's text as the reason."""


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


def modules(path=None) -> list[str]:
    """Names of the grading modules (chNN) on the package path (or `path`), sorted."""
    return sorted(i.name for i in pkgutil.iter_modules(path if path is not None else _package.__path__)
                  if _MODULE.match(i.name))


def discover() -> dict:
    """Import every labkit.grading.chNN module and collect its TASKS (ids must be unique)."""
    found: dict[str, Any] = {}
    for name in modules():
        mod = importlib.import_module(f"labkit.grading.{name}")
        tasks = getattr(mod, "TASKS", None)
        if not isinstance(tasks, (tuple, list)):
            raise LabkitError(f"labkit.grading.{name} exports no TASKS tuple")
        for t in tasks:
            if not isinstance(t, (KernelTask, NumericTask)):
                raise LabkitError(f"labkit.grading.{name}.TASKS holds {t!r}, not a KernelTask or NumericTask")
            if t.id in found:
                raise LabkitError(f"exercise {t.id} is defined twice (labkit.grading.{name})")
            if t.chapter != name[2:]:
                raise LabkitError(f"exercise {t.id} is in labkit.grading.{name}: its id must start with {name[2:]}.")
            found[t.id] = t
    return found


def all_tasks() -> dict:
    if not _TASKS:
        _TASKS.update(discover())
    return _TASKS


def reset() -> None:
    """Forget the discovered tasks (the next lookup discovers them again)."""
    _TASKS.clear()


def get(task_id: str):
    tasks = all_tasks()
    if task_id not in tasks:
        raise LabkitError(f"no exercise named {task_id!r}; the exercises are: {', '.join(tasks)}")
    return tasks[task_id]


def for_chapter(chapter: str) -> list:
    return [t for t in all_tasks().values() if t.chapter == chapter]


def chapters() -> list[str]:
    return sorted({t.chapter for t in all_tasks().values()})


# ------------------------------------------------------------------ helpers for hidden-shape generators

def primes_between(rng: random.Random, lo: int, hi: int) -> int:
    """A prime drawn from [lo, hi) (trial division: keep hi below about 1e12)."""
    def is_prime(n):
        if n < 2:
            return False
        if n % 2 == 0:
            return n == 2
        f = 3
        while f * f <= n:
            if n % f == 0:
                return False
            f += 2
        return True
    for _ in range(10000):
        n = rng.randrange(lo, hi) | 1
        if is_prime(n):
            return n
    return lo | 1


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


def bits_of(value: float, kind: str) -> int:
    """The bit pattern of `value` as float32 ("f32") or bf16 ("bf16", rounded to nearest even)."""
    u = struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if kind == "f32":
        return u
    if math.isnan(value):
        return 0x7FC0
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def plant(array, kind: str, values, *, start: int = 0, min_size: int = 64):
    """Write the special `values` (NaN, infinities, huge or subnormal numbers) at spread-out, fixed
    positions of `array` (a CuPy array of float32 or bf16 bits), when it has at least `min_size` elements:
    every task's inputs reach the values where a naive formula fails. Returns the array."""
    import cupy as cp
    flat = array.reshape(-1)
    n = int(flat.size)
    if n < max(min_size, len(values)):
        return array
    step = max(1, n // len(values))
    for k, v in enumerate(values):
        i = (start + k * step + 37 * k) % n
        b = bits_of(v, kind)
        if kind == "f32":
            flat[i:i + 1].view(cp.uint32)[...] = cp.uint32(b)
        else:
            flat[i:i + 1][...] = cp.uint16(b)
    return array


def decode(array, kind: str, xp, dtype):
    """A kernel input or output as floats of `dtype` in module `xp` (numpy: copied to the host)."""
    if kind == "bf16":
        array = bf16.from_bits(array)
    if xp.__name__ == "numpy" and hasattr(array, "get"):
        array = array.get()
    return array.astype(dtype)


def sms() -> int:
    return sm_count()
