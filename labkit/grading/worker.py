"""The grading worker: runs in a process of its own (multiprocessing, spawn), never in the notebook's.

It compiles the learner's source, runs the kernel on each case with poisoned, canary-padded outputs,
compares with a float64 reference (on the host; on the GPU for large shapes), then times the kernel and
`cupy.copyto` on the same byte count. It reports each step to the parent over a pipe as it goes:

    ("stage", kind, index, seconds)   kind: "startup", "compile", "case", "speed"; the parent's time limit
    ("compile_error", message)
    ("case", index, status, detail)
    ("speed", {fields of SpeedResult})
    ("fault", index or None, message)  a CUDA error after the learner's kernel ran; the worker then exits
    ("error", index or None, traceback) a bug in the grader, not in the learner's kernel
    ("done",)

A kernel that faults poisons this process's CUDA context, and one that hangs blocks it: either way the
parent ends this process, and its own CUDA context (the learner's notebook) is untouched.
"""
from __future__ import annotations

import math
import os
import traceback
import types

HOST_LIMIT = 1 << 22        # outputs up to this many elements are compared on the host, in float64
F64_LIMIT = 1 << 28         # larger ones on the GPU, in float64 up to this size, in float32 beyond
CHUNK = 1 << 26             # GPU comparison in chunks of this many elements

DEFAULT_BUDGETS = {"startup": 120.0, "compile": 60.0, "case": 10.0, "speed": 60.0}


def main(conn, request: dict) -> None:
    """Entry point of the spawned process."""
    if not os.environ.get("LABKIT_WORKER_DEBUG"):
        _quiet()
    try:
        _run(conn, request)
    except BaseException:  # noqa: BLE001 - whatever happens, tell the parent
        try:
            conn.send(("error", None, traceback.format_exc(limit=8)))
        except Exception:
            pass
    finally:
        try:
            conn.close()
        except Exception:
            pass


def _quiet():
    """Learner printf output and library warnings go nowhere (not into the instructor's progress bar)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    except OSError:
        pass


def _cuda_errors():
    from cupy_backends.cuda.api.driver import CUDADriverError
    from cupy_backends.cuda.api.runtime import CUDARuntimeError
    return (CUDARuntimeError, CUDADriverError)


def _run(conn, req: dict) -> None:
    budgets = {**DEFAULT_BUDGETS, **req.get("budgets", {})}
    conn.send(("stage", "startup", None, budgets["startup"]))
    import cupy as cp
    from ..compile import load_kernel
    from ..errors import KernelCompileError
    from . import tasks as T
    task = T.get(req["task"])
    ctx = types.SimpleNamespace(sms=T.sms())
    cases = [T.Case(**c) for c in req["cases"]]
    cuda_errors = _cuda_errors()
    warm_up(task, ctx)

    conn.send(("stage", "compile", None, budgets["compile"]))
    try:
        kernel = load_kernel(req["source"], task.kernel)
    except KernelCompileError as e:
        conn.send(("compile_error", str(e)))
        return

    any_bad = False
    for i, case in enumerate(cases):
        conn.send(("stage", "case", i, task.case_seconds(case.shape, budgets["case"])))
        try:
            status, detail, kept = run_case(task, kernel, case, ctx)
        except _LearnerFault as e:
            conn.send(("fault", i, e.message))
            return
        conn.send(("case", i, status, detail))
        any_bad |= status not in ("ok", "skipped")
        if case.role == "speed" and req.get("speed"):
            if any_bad or kept is None:
                conn.send(("speed", {"status": "skipped", "detail": "not measured: the kernel must be correct first"}))
            else:
                conn.send(("stage", "speed", None, budgets["speed"]))
                try:
                    conn.send(("speed", measure_speed(task, kernel, case, ctx, *kept)))
                except cuda_errors as e:
                    conn.send(("fault", None, _fault_text(e)))
                    return
        kept = None
        cp.get_default_memory_pool().free_all_blocks()
    conn.send(("done",))


class _LearnerFault(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


def _fault_text(e) -> str:
    return f"the kernel crashed: {e}"


# ------------------------------------------------------------------------------------------- a case

def make_guard(shape, dtype: str, offset: int = 0):
    """A GuardedOutput; with offset > 0 the output starts `offset` elements past the usual (16-byte
    aligned) start, the elements skipped holding the canary too (a write there is a write before the
    output)."""
    from ..checks import CANARY, UINT, GuardedOutput
    if not offset:
        return GuardedOutput(shape, dtype)
    n = math.prod(shape)
    g = GuardedOutput((n + offset,), dtype)
    w = g.store.itemsize
    g._raw[g.pad:g.pad + offset].fill(UINT[w](CANARY[w]))
    g.pad += offset
    g.size = n
    g.shape = tuple(shape)
    g.array = g._raw[g.pad:g.pad + n].view(g.store).reshape(g.shape)
    return g


def run_case(task, kernel, case, ctx):
    """(status, detail, kept): kept = (inputs, guard) for the speed case when correct, else None."""
    import cupy as cp
    from . import tasks as T
    shape = case.shape
    out_shape = tuple(task.out_shape(shape))
    need = 4 * task.bytes_moved(shape) + (64 << 20)
    free, _ = cp.cuda.runtime.memGetInfo()
    if need > 0.9 * free:
        return "skipped", (f"{case.label} needs about {need / 1e9:.0f} GB of GPU memory; "
                           f"{free / 1e9:.0f} GB are free on this GPU"), None
    try:
        ins = task.inputs(case, T.Gen(case.seed))
        guard = make_guard(out_shape, task.out_dtype, task.out_offset(case.variant))
        cp.cuda.Device().synchronize()
    except cp.cuda.memory.OutOfMemoryError:
        return "skipped", f"{case.label}: not enough GPU memory for the inputs", None
    arrays = {name: a for name, (a, _) in ins.items()}
    cuda_errors = _cuda_errors()
    try:
        task.launch(kernel, arrays, guard.array, case, ctx)
        cp.cuda.Device().synchronize()
        problems = guard.problems()
    except cuda_errors as e:
        raise _LearnerFault(_fault_text(e)) from None
    if problems:
        return "wrong", "; ".join(problems), None
    try:
        mismatch = check_values(task, ins, guard, case)
    except cp.cuda.memory.OutOfMemoryError:
        return "skipped", f"{case.label}: not enough GPU memory to compute the reference", None
    if mismatch is not None:
        return "wrong", str(mismatch), None
    return "ok", "", ((arrays, guard) if case.role == "speed" else None)


def check_values(task, ins, guard, case):
    """None, or the checks.Mismatch naming the first wrong element (host float64, or GPU for big shapes)."""
    import numpy as np
    from ..checks import compare_nd
    from .tasks import decode
    total = guard.size
    out_kind = "bf16" if task.out_dtype == "bfloat16" else "f32"
    if total <= HOST_LIMIT:
        with np.errstate(all="ignore"):
            host = {name: decode(a, kind, np, np.float64) for name, (a, kind) in ins.items()}
            ref = task.reference(np, host, case)
            got = decode(guard.array, out_kind, np, np.float64)
            return compare_nd(got, ref, guard.shape, dtype=task.out_dtype, rtol=task.rtol, atol=task.atol)
    import cupy as cp
    dt = cp.float64 if total <= F64_LIMIT else cp.float32
    dev = {name: decode(a, kind, cp, dt) for name, (a, kind) in ins.items()}
    ref = task.reference(cp, dev, case)
    del dev
    got = decode(guard.array, out_kind, cp, dt)
    return compare_gpu(got, ref, guard.shape, dtype=task.out_dtype, rtol=task.rtol, atol=task.atol)


def compare_gpu(got, ref, shape, dtype="float32", rtol=None, atol=None):
    """labkit.checks.compare on the GPU, in chunks (same tolerance rule, same Mismatch text)."""
    import cupy as cp
    from ..checks import TOLERANCE, Mismatch, _index
    got = got.reshape(-1)
    ref = ref.reshape(-1)
    if got.size != ref.size:
        raise ValueError(f"shape mismatch: got {got.size} elements, reference {ref.size}")
    n = ref.size
    rtol = TOLERANCE[dtype] if rtol is None else rtol
    if atol is None:
        sq, nf = 0.0, 0
        for s in range(0, n, CHUNK):
            r = ref[s:s + CHUNK]
            fin = cp.isfinite(r)
            nf += int(fin.sum())
            v = cp.where(fin, r, 0).astype(cp.float64)
            sq += float((v * v).sum())
        atol = rtol * (math.sqrt(sq / nf) if nf else 1.0)
    count, first = 0, None
    for s in range(0, n, CHUNK):
        r, g = ref[s:s + CHUNK], got[s:s + CHUNK]
        fin = cp.isfinite(r)
        ok = cp.where(fin, cp.abs(g - r) <= atol + rtol * cp.abs(r), (cp.isnan(r) & cp.isnan(g)) | (g == r))
        bad = ~ok
        c = int(bad.sum())
        if c and first is None:
            first = s + int(cp.argmax(bad))
        count += c
    if not count:
        return None
    return Mismatch(count, n, _index(first, tuple(shape)), float(ref[first]), float(got[first]))


# -------------------------------------------------------------------------------------------- speed

def measure_speed(task, kernel, case, ctx, arrays, guard) -> dict:
    """Time the kernel and cupy.copyto moving the same bytes, in this process, back to back."""
    import cupy as cp
    from ..timing import bench
    nbytes = task.bytes_moved(case.shape)
    half = max(1, nbytes // 8)                 # float32 elements: copyto reads half, writes half
    src = cp.ones(half, dtype=cp.float32)
    dst = cp.empty_like(src)
    copy1 = bench(lambda: cp.copyto(dst, src))
    t = bench(lambda: task.launch(kernel, arrays, guard.array, case, ctx))
    copy2 = bench(lambda: cp.copyto(dst, src))
    problems = guard.problems()                # still right after all those runs?
    if problems:
        return {"status": "error", "label": case.label,
                "detail": "not measured: the output went wrong while being timed: " + "; ".join(problems)}
    return {"status": "measured", "label": case.label, "kernel_ms": t.median_ms,
            "copy_ms": min(copy1.median_ms, copy2.median_ms), "bytes": nbytes}


# ------------------------------------------------------------------------------------------ warm-up

def warm_up(task, ctx) -> None:
    """Compile CuPy's own kernels (inputs, guards, references, comparisons) before any time limit that
    a learner's case runs under, by going once through a case with the reference as the "output"."""
    import cupy as cp
    import numpy as np
    from .. import bf16
    from ..checks import compare_nd
    from . import tasks as T
    cases = [c for c in task.cases() if task.elements(c.shape) > 0] or task.cases()
    case = cases[0]
    ins = task.inputs(case, T.Gen(1))
    shape = tuple(task.out_shape(case.shape))
    guard = make_guard(shape, task.out_dtype, 0)
    out_kind = "bf16" if task.out_dtype == "bfloat16" else "f32"
    for dt in (cp.float64, cp.float32):
        dev = {name: T.decode(a, kind, cp, dt) for name, (a, kind) in ins.items()}
        ref = task.reference(cp, dev, case)
        enc = bf16.to_bits(ref.astype(cp.float32)) if out_kind == "bf16" else ref.astype(cp.float32)
        guard.array[...] = enc.reshape(shape)
        guard.problems()
        compare_gpu(T.decode(guard.array, out_kind, cp, dt), ref, shape, dtype=task.out_dtype,
                    rtol=task.rtol, atol=task.atol)
    with np.errstate(all="ignore"):
        host = {name: T.decode(a, kind, np, np.float64) for name, (a, kind) in ins.items()}
        compare_nd(T.decode(guard.array, out_kind, np, np.float64), task.reference(np, host, case), shape,
                   dtype=task.out_dtype, rtol=task.rtol, atol=task.atol)
    cp.cuda.Device().synchronize()
