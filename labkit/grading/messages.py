"""The messages between a grading worker and its parent (the supervisor), one dataclass each.

The worker sends them over a multiprocessing pipe, in this order: `Stage("startup")`, then `CaseDone` for
each case judged too large for the GPU's free memory (before any of the learner's code is loaded),
`Stage("compile")`, then either `CompileFailed` or, per case, `Stage("case", i)` and `CaseDone`, with
`Stage("speed")` and `SpeedDone` after the speed case; `Done` at the end. `Fault` (a CUDA error after the
learner's kernel ran: the worker exits) and `GraderError` (a bug in the grader) can come at any point.

`Unsupported` (the task's kernels cannot run on this GPU: a Hopper-only exercise on another GPU) comes right
after `Stage("startup")`, before anything else, and ends the run.

`Stage.seconds` is the parent's time limit for that step.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Stage:
    kind: str                     # "startup", "compile", "case", "speed"
    index: int | None = None      # the case, for kind "case"
    seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class CompileFailed:
    message: str                  # the learner's problem: compile error, bad #include, unloadable module


@dataclasses.dataclass(frozen=True)
class Unsupported:
    message: str                  # this GPU cannot run the task at all (wrong architecture): not graded


@dataclasses.dataclass(frozen=True)
class CaseDone:
    index: int
    status: str                   # verdict.OK, WRONG, SKIPPED (not graded), ...
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class SpeedDone:
    status: str                   # "measured", "skipped", "error"
    label: str = ""
    kernel_ms: float = 0.0
    copy_ms: float = 0.0
    bytes: int = 0
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Fault:
    index: int | None             # the case that crashed, None while timing
    message: str


@dataclasses.dataclass(frozen=True)
class GraderError:
    index: int | None
    traceback: str


@dataclasses.dataclass(frozen=True)
class Done:
    pass


MESSAGES = (Stage, CompileFailed, Unsupported, CaseDone, SpeedDone, Fault, GraderError, Done)
