"""The grading worker: runs in a process of its own (multiprocessing, spawn), never in the notebook's.

Order of work, each step reported to the parent as a `messages` dataclass:
1. start-up: CuPy, the task, warm-up of the grader's own kernels (no learner code yet);
2. memory: each case's peak (inputs, their pristine copies, guarded output with its pads, reference and
   comparison temporaries: `case_memory`) against the GPU's free memory, judged BEFORE the learner's module
   is loaded; a case that does not fit is "not graded" (verdict.SKIPPED), never points;
3. compile: the source checked (encoding, size, #include only of course and CUDA headers), compiled (for the
   task's `arch` when it fixes one: sm_90a) and loaded; a compile error or a module the driver cannot load is the learner's (CompileFailed);
4. per case: inputs generated from the case seed and copied; the reference computed from them BEFORE the
   launch; one launch into a poisoned `measure.checks.GuardedOutput` (64 KiB canary pads); then the inputs
   must be unchanged (bit for bit), the canaries intact, every element written, the values within tolerance
   (`measure.checks.compare`, host float64 for small outputs, GPU chunks for large ones); a task with several
   outputs (`KernelTask.outputs`: attention's O and LSE) gets one guarded buffer per output and its own check
   (`KernelTask.verify`, its reference computed before the launch too);
5. speed (the speed case, when everything so far was right): every timed launch is re-poisoned before it
   runs, L2 flushed, timed with CUDA events, and its output and inputs checked afterwards; a time below
   the physical floor of the work (bytes / datasheet bandwidth, FLOPs / the task's datasheet peak) is an
   error, not a pass; the baseline is timed before and after: `cupy.copyto` on the same bytes, or the task's
   `speed_baseline` (a library: cuBLAS) on the same inputs, its output checked against the same reference.

A kernel that faults poisons this process's CUDA context, and one that hangs blocks it: either way the
parent ends this process, and its own CUDA context (the learner's notebook) is untouched.
"""
from __future__ import annotations

import math
import os
import shutil
import traceback
import types

import numpy as np

from ..errors import KernelCompileError
from ..measure.ceilings import datasheet_for
from ..measure import bf16
from ..measure.checks import CHUNK, PAD_BYTES, GuardedOutput, compare
from ..measure.compile import arch_options, load_module, no_such_kernel
from ..measure.timing import L2Flusher, bench, summarize, time_copy
from . import tasks as T
from .messages import CaseDone, CompileFailed, Done, Fault, GraderError, SpeedDone, Stage, Unsupported
from .sources import safe_cwd, source_problem
from .verdict import OK, SKIPPED, WRONG

HOST_LIMIT = 1 << 22        # outputs up to this many elements are compared on the host, in float64
F64_LIMIT = 1 << 28         # larger ones on the GPU, in float64 up to this size, in float32 beyond
MEMORY_FRACTION = 0.9       # of the free memory a case may plan to use
SLACK = 256 << 20           # CuPy's pool rounding, small temporaries
SPEED_WARMUP, SPEED_REPS = 3, 15
# an unknown GPU: floors generous enough for any GPU of the next years
GENEROUS_BANDWIDTH_GBPS = 20_000
GENEROUS_TFLOPS = 5_000

# seconds: "case" is the learner's launch; "prepare" covers the grader's work around it (inputs, reference,
# comparison), which on a cold machine includes compiling CuPy's own kernels on first use
DEFAULT_BUDGETS = {"startup": 120.0, "compile": 60.0, "case": 10.0, "prepare": 120.0, "speed": 60.0}


def main(conn, request: dict) -> None:
    """Entry point of the spawned process."""
    if request.get("device") is not None:                 # before CuPy is imported: one GPU per worker
        os.environ["CUDA_VISIBLE_DEVICES"] = str(request["device"])
    if not os.environ.get("LABKIT_WORKER_DEBUG"):
        _quiet()
    cwd = None
    try:
        cwd = safe_cwd()
        _run(conn, request)
    except BaseException:  # noqa: BLE001 - whatever happens, tell the parent
        try:
            conn.send(GraderError(None, traceback.format_exc(limit=8)))
        except Exception:
            pass
    finally:
        try:
            conn.close()
        except Exception:
            pass
        if cwd:
            os.chdir("/")
            shutil.rmtree(cwd, ignore_errors=True)


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


def _gb(b: float) -> str:
    return f"{b / 1e9:.1f} GB"


def _run(conn, req: dict) -> None:
    budgets = {**DEFAULT_BUDGETS, **req.get("budgets", {})}
    conn.send(Stage("startup", None, budgets["startup"]))
    import cupy as cp
    task = T.get(req["task"])
    cases = [T.Case(**c) for c in req["cases"]]
    speed = bool(req.get("speed"))
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    ctx = types.SimpleNamespace(sms=T.sms(), gpu=name, module_bytes=0, flusher=None)
    if getattr(task, "arch", None):        # a Hopper-only exercise on another GPU: say so, grade nothing
        cc = cp.cuda.Device().compute_capability                  # "90"
        why = task.runs_on(f"{cc[:-1]}.{cc[-1]}")
        if why:
            conn.send(Unsupported(f"{why}; grade it on such a GPU"))
            return
    cuda_errors = _cuda_errors()
    warm_up(task, ctx, speed)

    # memory, judged before any of the learner's code is loaded
    cp.get_default_memory_pool().free_all_blocks()
    free, _ = cp.cuda.runtime.memGetInfo()
    skipped = {}
    for i, case in enumerate(cases):
        need = case_memory(task, case, speed=speed and case.role == "speed")
        if need > MEMORY_FRACTION * free:
            skipped[i] = (f"{case.label} needs about {_gb(need)} of GPU memory, {_gb(free)} are "
                          "free on this GPU; grade it on a GPU with more memory")
            conn.send(CaseDone(i, SKIPPED, skipped[i]))

    conn.send(Stage("compile", None, budgets["compile"]))
    problem = source_problem(req["source"])
    if problem:
        conn.send(CompileFailed(problem))
        return
    try:
        kernel = load(req["source"], task.kernel, cuda_errors, compile_options(task, req["source"]))
    except _LoadFailed as e:
        conn.send(CompileFailed(e.message))
        return
    after, _ = cp.cuda.runtime.memGetInfo()
    ctx.module_bytes = max(0, free - after)

    any_bad = False
    for i, case in enumerate(cases):
        if i in skipped:
            if case.role == "speed" and speed:
                conn.send(SpeedDone("skipped", detail="not measured: the speed shape was not graded (GPU memory)"))
            continue
        conn.send(Stage("prepare", i, budgets["prepare"]))
        limit = task.case_seconds(case.shape, budgets["case"])

        def stage(kind, i=i, limit=limit):      # the learner's time limit covers the launch alone
            conn.send(Stage(kind, i, limit if kind == "case" else budgets["prepare"]))
        try:
            status, detail, kept = run_case(task, kernel, case, ctx, stage)
        except _LearnerFault as e:
            conn.send(Fault(i, e.message))
            return
        conn.send(CaseDone(i, status, detail))
        any_bad |= status != OK
        if case.role == "speed" and speed:
            if any_bad or kept is None:
                conn.send(SpeedDone("skipped", detail="not measured: the kernel must be correct first"))
            else:
                conn.send(Stage("speed", None, budgets["speed"]))
                try:
                    conn.send(measure_speed(task, kernel, case, ctx, kept))
                except _LearnerFault as e:
                    conn.send(Fault(None, e.message))
                    return
                except cuda_errors as e:
                    conn.send(Fault(None, _fault_text(e)))
                    return
        kept = None
        cp.get_default_memory_pool().free_all_blocks()
    conn.send(Done())


class _LoadFailed(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


def compile_options(task, source: str) -> tuple[str, ...]:
    """The options the learner's source is compiled with: -arch=<task.arch> for a task that fixes its target
    (sm_90a: wgmma), unless the source's own `// requires: sm_90a` marker already asks for it."""
    arch = getattr(task, "arch", None)
    if not arch or f"-arch={arch}" in arch_options(source):
        return ()
    return (f"-arch={arch}",)


def load(source: str, name: str, cuda_errors, options=()):
    """The learner's kernel, compiled and loaded; _LoadFailed (the learner's problem, with the cause) when
    it does not compile, has no such kernel, or the driver cannot load the module."""
    try:
        mod = load_module(source, options) if options else load_module(source)
        return mod.get_function(name)
    except KernelCompileError as e:
        raise _LoadFailed(str(e)) from None
    except cuda_errors as e:
        if "NOT_FOUND" in str(e):
            raise _LoadFailed(no_such_kernel(name, source)) from None
        raise _LoadFailed(f"the CUDA driver could not load the compiled module: {e} (a __device__ array larger "
                          "than the GPU's free memory?)") from None
    except (UnicodeError, ValueError) as e:
        raise _LoadFailed(f"the source cannot be passed to the compiler: {e}") from None


class _LearnerFault(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


def _fault_text(e) -> str:
    return f"the kernel crashed: {e}"


# ------------------------------------------------------------------------------------------ memory

def _outputs_bytes(specs) -> int:
    return sum(math.prod(s) * (2 if dt == "bfloat16" else np.dtype(dt).itemsize) for _, s, dt in specs)


def case_memory(task, case, speed: bool = False) -> int:
    """Bytes of GPU memory one case needs at its peak: inputs and their pristine copies, the guarded
    output with its pads, the reference (on the GPU for large outputs, with the decoded inputs and the
    formula's temporaries) and the comparison's temporaries; the speed case adds the copy buffers and the
    L2 flush buffer. Inputs are counted as bf16 (the most elements per byte). Plain arithmetic (no GPU).
    A task with several outputs (`outputs`) says what its verify takes (`ref_bytes`)."""
    shape = T.norm_shape(case.shape)
    if getattr(task, "outputs", None) is not None:
        specs = task.outputs(shape)
        out_b = _outputs_bytes(specs)
        moved = task.bytes_moved(shape)
        in_b = max(0, moved - out_b)
        extra = task.ref_bytes(shape) if task.ref_bytes is not None else 4 * (in_b + out_b) * task_ref_temps(task)
        if speed:
            extra += moved + (256 << 20)
        return int(2 * in_b + 4096 * 4 + out_b + 2 * PAD_BYTES * len(specs) + SLACK + extra)
    out_e = task.elements(shape)
    out_b = out_e * task.out_itemsize()
    moved = task.bytes_moved(shape)
    in_b = max(0, moved - out_b)
    base = 2 * in_b + 4096 * 4 + out_b + 2 * PAD_BYTES + SLACK
    if out_e <= HOST_LIMIT:
        extra = 2 * in_b + 4 * out_e          # decoded on the GPU as float32 before the copy to the host
    else:
        d = 8 if out_e <= F64_LIMIT else 4
        in_e = in_b // 2
        ref_phase = in_e * d + (in_e * 4 if d == 8 else 0) + (1 + task_ref_temps(task)) * out_e * d
        cmp_phase = out_e * d + out_e * d + out_e * 4 + 6 * CHUNK * 8
        extra = max(ref_phase, cmp_phase)
    if speed:
        extra += moved + (256 << 20)
    return int(base + extra)


def task_ref_temps(task) -> int:
    return int(task.ref_temps)


# ------------------------------------------------------------------------------------------- a case

def _kind(dtype: str) -> str:
    return "bf16" if dtype == "bfloat16" else "f32"


def reference(task, ins, case):
    """The expected output, from the inputs as generated (call it before the kernel runs): a NumPy float64
    array for small outputs, else a CuPy array (float64 up to F64_LIMIT elements, float32 beyond)."""
    return expected(task, ins, case)[0]


def case_atol(task, xp, decoded, case):
    """The task's absolute tolerance for `case`: its atol, or what its atol callable makes of the decoded
    inputs (None: rtol x the reference's RMS, computed by `compare`)."""
    a = task.atol
    return float(a(xp, decoded, case)) if callable(a) else a


def expected(task, ins, case):
    """(reference, atol): the reference as `reference` computes it, and the case's absolute tolerance from
    the same decoded inputs. A task with `verify`: (its check, None), the reference computed now."""
    if getattr(task, "verify", None) is not None:
        return task.verify(ins, case), None
    total = task.elements(case.shape)
    if total <= HOST_LIMIT:
        with np.errstate(all="ignore"):
            host = {name: T.decode(a, kind, np, np.float64) for name, (a, kind) in ins.items()}
            ref = np.asarray(task.reference(np, host, case), dtype=np.float64)
            return ref, case_atol(task, np, host, case)
    import cupy as cp
    dt = cp.float64 if total <= F64_LIMIT else cp.float32
    dev = {name: T.decode(a, kind, cp, dt) for name, (a, kind) in ins.items()}
    ref = task.reference(cp, dev, case)
    if any(ref is v for v in dev.values()):
        ref = ref.copy()
    atol = case_atol(task, cp, dev, case)
    del dev
    return ref, atol


def check_values(task, guard, ref, atol=None):
    """None, or the checks.Mismatch naming the first wrong element of the output against `ref` (`atol`:
    the case's tolerance from `expected`; None: the task's own, when it is not a callable)."""
    if getattr(task, "verify", None) is not None:
        return ref(guard.array)
    atol = atol if atol is not None or callable(task.atol) else task.atol
    return check_array(task, guard.array, ref, atol, guard.shape, values=guard.values)


def check_array(task, array, ref, atol, shape, values=None):
    """None, or the checks.Mismatch of an output array of the task's dtype against `ref` (a task with
    `verify`: what its check says of the array as the first output)."""
    if getattr(task, "verify", None) is not None:
        return ref(array)
    if isinstance(ref, np.ndarray):
        got = values(np) if values is not None else T.decode(array, _kind(task.out_dtype), np, np.float64)
        return compare(got, ref, dtype=task.out_dtype, rtol=task.rtol, atol=atol, shape=shape)
    import cupy as cp
    got = T.decode(array, _kind(task.out_dtype), cp, ref.dtype)
    return compare(got, ref, dtype=task.out_dtype, rtol=task.rtol, atol=atol, shape=shape)


def snapshot(ins) -> dict:
    """A copy of each input, to prove afterwards that the kernel left its inputs alone."""
    return {name: a.copy() for name, (a, _) in ins.items()}


def changed_inputs(ins, snap) -> list[str]:
    """'the kernel wrote to its input x ...' for each input whose bits differ from its snapshot."""
    import cupy as cp
    out = []
    for name, (a, _) in ins.items():
        u = cp.uint32 if a.dtype.itemsize == 4 else cp.uint16
        now, was = a.reshape(-1).view(u), snap[name].reshape(-1).view(u)
        count, first = 0, None
        for s in range(0, now.size, CHUNK):
            diff = now[s:s + CHUNK] != was[s:s + CHUNK]
            c = int(diff.sum())
            if c and first is None:
                first = s + int(cp.argmax(diff))
            count += c
        if count:
            out.append(f"the kernel wrote to its input {name} ({count} of {now.size} elements changed; first: "
                       f"[{first}]); inputs are const")
    return out


def _oom_text(case, ctx) -> str:
    mod = f"; your module's own __device__ data takes {_gb(ctx.module_bytes)}" if ctx.module_bytes > (1 << 30) else ""
    return f"out of GPU memory for {case.label} once your module was loaded{mod}"


class GuardedOutputs:
    """The outputs of a task that writes several (`KernelTask.outputs`: attention's O and LSE), each a
    GuardedOutput of its own (its own poison and canaries); `array` is {name: array}, what `launch` gets;
    `shape` and `store` are the first output's."""

    def __init__(self, specs, offset: int = 0):
        self.guards = {name: GuardedOutput(tuple(shape), dtype, offset=offset) for name, shape, dtype in specs}
        first = next(iter(self.guards.values()))
        self.shape, self.store = first.shape, first.store
        self.array = {name: g.array for name, g in self.guards.items()}

    def problems(self) -> list[str]:
        return [f"{name}: {p}" for name, g in self.guards.items() for p in g.problems()]

    def poison(self) -> None:
        for g in self.guards.values():
            g.poison()


def make_guard(task, case):
    """The poisoned, canary-fenced output(s) of one case."""
    if getattr(task, "outputs", None) is not None:
        return GuardedOutputs(task.outputs(T.norm_shape(case.shape)), offset=task.out_offset(case.variant))
    return GuardedOutput(tuple(task.out_shape(case.shape)), task.out_dtype, offset=task.out_offset(case.variant))


def run_case(task, kernel, case, ctx, stage=lambda kind: None):
    """(status, detail, kept): kept = (arrays, guard, ref, ins, snap, atol) for the speed case when correct.
    `stage("case")` is called just before the learner's launch and `stage("check")` just after it: the
    grader's own work (inputs, reference, first-use compiles of CuPy's kernels on a cold machine, the
    comparison) runs under the grader's budget, not the learner's time limit."""
    import cupy as cp
    try:
        ins = task.inputs(case, T.Gen(case.seed))
        snap = snapshot(ins)
        ref, atol = expected(task, ins, case)                 # before the kernel can touch anything
        guard = make_guard(task, case)
        cp.cuda.Device().synchronize()
    except cp.cuda.memory.OutOfMemoryError:
        return WRONG, _oom_text(case, ctx), None
    arrays = {name: a for name, (a, _) in ins.items()}
    cuda_errors = _cuda_errors()
    stage("case")
    try:
        task.launch(kernel, arrays, guard.array, case, ctx)
        cp.cuda.Device().synchronize()
    except cuda_errors as e:
        raise _LearnerFault(_fault_text(e)) from None
    stage("check")
    try:
        problems = changed_inputs(ins, snap) + guard.problems()
    except cuda_errors as e:
        raise _LearnerFault(_fault_text(e)) from None
    if problems:
        return WRONG, "; ".join(problems), None
    try:
        mismatch = check_values(task, guard, ref, atol)
    except cp.cuda.memory.OutOfMemoryError:
        return WRONG, _oom_text(case, ctx), None
    if mismatch is not None:
        return WRONG, str(mismatch), None
    return OK, "", ((arrays, guard, ref, ins, snap, atol) if case.role == "speed" else None)


# -------------------------------------------------------------------------------------------- speed

def physical_floor(task, shape, gpu_name: str) -> tuple[float, str]:
    """(ms, why): no launch that does the work can be faster: bytes over the datasheet bandwidth, FLOPs over
    the datasheet peak (the highest of the task's `floor_peaks`: fp32 and bf16 unless the task says
    otherwise), generous figures for a GPU not in the table."""
    row = datasheet_for(gpu_name or "")
    bw = row[1]["bandwidth_gbps"] if row else GENEROUS_BANDWIDTH_GBPS
    peak = max(row[1][k] for k in task.floor_peaks) if row else GENEROUS_TFLOPS
    where = f"the {row[0]} datasheet" if row else "generous figures for an unlisted GPU"
    nbytes, flops = task.bytes_moved(shape), task.flops(shape)
    t_bytes = nbytes / (bw * 1e9) * 1e3
    t_flops = flops / (peak * 1e12) * 1e3
    if t_flops > t_bytes:
        return t_flops, f"{flops:.3g} FLOP at {peak:g} TFLOP/s ({where})"
    return t_bytes, f"{nbytes:.3g} bytes at {bw:g} GB/s ({where})"


def measure_speed(task, kernel, case, ctx, kept) -> SpeedDone:
    """Time the kernel, every timed launch checked, and its baseline before and after: cupy.copyto moving
    the same bytes, or the task's speed_baseline (a library) on the same inputs."""
    import cupy as cp
    arrays, guard, ref, ins, snap, atol = kept
    nbytes = task.bytes_moved(case.shape)
    if task.speed_baseline is None:
        copy1 = time_copy(nbytes)
    else:
        base_out = cp.empty(guard.shape, dtype=guard.store)
        run_base = lambda: task.speed_baseline(arrays, base_out, case)   # noqa: E731
        try:
            copy1 = bench(run_base, max_reps=50, target_ms=200.0)
        except T.BaselineUnavailable as e:
            return SpeedDone("skipped", case.label, detail=f"not measured: {e}")
    if ctx.flusher is None:
        ctx.flusher = L2Flusher()
    stream = cp.cuda.get_current_stream()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    cuda_errors = _cuda_errors()
    times = []
    for rep in range(SPEED_WARMUP + SPEED_REPS):
        guard.poison()                           # a launch that skips the work leaves the poison
        ctx.flusher()
        try:
            start.record(stream)
            task.launch(kernel, arrays, guard.array, case, ctx)
            end.record(stream)
            end.synchronize()
        except cuda_errors as e:
            raise _LearnerFault(_fault_text(e)) from None
        ms = cp.cuda.get_elapsed_time(start, end)
        problems = changed_inputs(ins, snap) + guard.problems()
        mismatch = None if problems else check_values(task, guard, ref, atol)
        if problems or mismatch is not None:
            why = "; ".join(problems) if problems else str(mismatch)
            return SpeedDone("error", case.label, detail=f"not measured: timed launch {rep + 1} did not do the "
                                                         f"work: {why}")
        if rep >= SPEED_WARMUP:
            times.append(ms)
    if task.speed_baseline is None:
        copy2 = time_copy(nbytes)
    else:
        copy2 = bench(run_base, max_reps=50, target_ms=200.0)
        bad = changed_inputs(ins, snap) or check_array(task, base_out, ref, atol, guard.shape)
        if bad:
            why = "; ".join(bad) if isinstance(bad, list) else str(bad)
            return SpeedDone("error", case.label, detail=(
                f"not measured: the baseline ({task.baseline_name}) did not meet the exercise's tolerance: {why} "
                "(a grader problem, not yours: please report it)"))
    t = summarize(times)
    floor_ms, floor_why = physical_floor(task, case.shape, ctx.gpu)
    if t.min_ms < floor_ms:
        return SpeedDone("error", case.label, detail=(
            f"not measured: a timed launch took {t.min_ms:.4f} ms, less than the physical floor of the work "
            f"({floor_ms:.4f} ms: {floor_why}); such a time cannot be right"))
    return SpeedDone("measured", case.label, kernel_ms=t.median_ms,
                     copy_ms=min(copy1.median_ms, copy2.median_ms), bytes=nbytes)


# ------------------------------------------------------------------------------------------ warm-up

def warm_up(task, ctx, speed: bool = False) -> None:
    """Compile CuPy's own kernels (inputs, guards, references, comparisons, input checks) before any time
    limit that a learner's case runs under, by going once through a case with the reference as the
    "output"."""
    import cupy as cp
    cases = [c for c in task.cases() if 64 <= task.elements(c.shape) <= HOST_LIMIT] or task.cases()
    case = cases[0]
    ins = task.inputs(case, T.Gen(1))
    snap = snapshot(ins)
    changed_inputs(ins, snap)
    if getattr(task, "verify", None) is not None:     # several outputs: the task's own check, on the poison
        guard = make_guard(task, case)
        guard.problems()
        task.verify(ins, case)(guard.array)
        guard.poison()
        _warm_baseline(task, ctx, speed, ins, guard, case)
        return
    shape = tuple(task.out_shape(case.shape))
    guard = GuardedOutput(shape, task.out_dtype)
    out_kind = _kind(task.out_dtype)
    for dt in (cp.float64, cp.float32):
        dev = {name: T.decode(a, kind, cp, dt) for name, (a, kind) in ins.items()}
        ref = task.reference(cp, dev, case)
        enc = bf16.to_bits(ref.astype(cp.float32)) if out_kind == "bf16" else ref.astype(cp.float32)
        guard.array[...] = enc.reshape(shape)
        guard.problems()
        compare(T.decode(guard.array, out_kind, cp, dt), ref, dtype=task.out_dtype, rtol=task.rtol,
                atol=case_atol(task, cp, dev, case), shape=shape)
    host, atol = expected(task, ins, case)
    compare(guard.values(np), host, dtype=task.out_dtype, rtol=task.rtol, atol=atol, shape=shape)
    guard.poison()
    _warm_baseline(task, ctx, speed, ins, guard, case)


def _warm_baseline(task, ctx, speed, ins, guard, case) -> None:
    import cupy as cp
    if speed:
        ctx.flusher = L2Flusher()
        if task.speed_baseline is not None:       # the library's import and first call (cuBLAS handle)
            try:
                task.speed_baseline({name: a for name, (a, _) in ins.items()},
                                    cp.empty(guard.shape, dtype=guard.store), case)
            except T.BaselineUnavailable:
                pass                              # the speed stage says so
    cp.cuda.Device().synchronize()
