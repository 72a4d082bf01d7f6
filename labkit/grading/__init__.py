"""Graded exercises: `grade` a CUDA kernel, `check_answers` to numeric questions, and the instructor's
batch grader (`python -m labkit grade`) and release step (`python -m labkit release`).

In a notebook:

    from labkit.grading import grade, check_answers
    grade("03.vec_add", vec_add_src)            # compiles, runs in a worker process, prints the verdict
    check_answers("01.numbers", roofline_answers)

`grade` never runs the learner's kernel in the notebook's own process: a crash or an endless loop ends
only the worker, and the next `grade` works.

A new chapter's exercises go in `labkit/grading/chNN.py`, which exports `TASKS = (...)` of
`tasks.KernelTask` / `tasks.NumericTask` (see tasks.py for the fields); nothing else needs to change.
"""
from __future__ import annotations

import os
import re

from ..errors import KernelCompileError, LabkitError
from ..measure.compile import compile_check, no_such_kernel
from ..measure.device import has_gpu
from . import tasks as T
from .answers import check
from .sources import source_problem
from .supervisor import run_task
from .verdict import CaseResult, RunResult, score

__all__ = ["grade", "check_answers"]


def grade(task_id: str, source: str, *, shapes=None, hidden: bool = False, speed: bool | None = None,
          timeout: float | None = None, seed: int | None = None):
    """Compile and check the CUDA `source` of exercise `task_id`; returns the Verdict (shown as text).

    shapes: the shapes to run (default: the exercise's public shapes; with hidden=True and no shapes, the
    hidden shapes drawn from `seed`, else $LABKIT_GRADE_SEED, else 0). hidden=True marks them as hidden
    tests (the instructor's cells). speed: time the kernel against cupy.copyto (default: yes, for the
    public shapes). timeout: an overall limit in seconds (each shape has its own limit anyway).
    """
    task = T.get(task_id)
    if isinstance(task, T.NumericTask):
        raise LabkitError(f"{task_id} is a numeric exercise: use check_answers({task_id!r}, answers)")
    if not isinstance(source, str):
        raise LabkitError(f"the source must be a string of CUDA C++ (the {task.source_var} cell), "
                          f"got {type(source).__name__}")
    if speed is None:
        speed = shapes is None and not hidden
    speed = bool(speed) and task.speed_shape is not None
    if hidden and shapes is None:
        s = int(seed if seed is not None else os.environ.get("LABKIT_GRADE_SEED") or 0)
        cases = task.cases(None, speed=speed) if speed else []
        cases += task.hidden_cases(s)
    else:
        cases = task.cases(shapes, hidden=hidden, speed=speed)
    if has_gpu():
        run = run_task(task, source, cases, speed=speed, total_timeout=timeout)
    else:
        run = RunResult(task.id, [CaseResult(c.label, c.hidden, c.role) for c in cases])
        err = compile_error_without_gpu(task, source)
        if err:
            run.compile_error = err
        else:
            run.crash = (f"no CUDA GPU is visible here: the source compiles ({getattr(task, 'arch', None) or 'sm_90'}, "
                         "NVRTC), but running it needs a GPU (on Colab: Runtime > Change runtime type > GPU)")
    return score(task, run, speed_requested=speed)


def compile_error_without_gpu(task, source: str) -> str | None:
    """The compile error NVRTC reports for `source` (no GPU needed), or None when it compiles."""
    problem = source_problem(source)
    if problem:
        return problem
    try:
        compile_check(source, getattr(task, "arch", None) or "sm_90")
    except KernelCompileError as e:
        return str(e)
    # __launch_bounds__(...) may stand between __global__ and the name (its parentheses are skipped)
    if not re.search(r'extern\s+"C"[^;{]*__global__(?:[^;{(]|__launch_bounds__\s*\([^)]*\))*\b'
                     + re.escape(task.kernel) + r"\s*\(", source):
        return no_such_kernel(task.kernel, source)
    return None


def check_answers(task_id: str, answers: dict):
    """Check the numeric answers of exercise `task_id`; returns the verdict (shown as text)."""
    task = T.get(task_id)
    if not isinstance(task, T.NumericTask):
        raise LabkitError(f"{task_id} is a kernel exercise: use grade({task_id!r}, source)")
    return check(task, answers)
