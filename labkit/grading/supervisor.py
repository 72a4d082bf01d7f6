"""The parent's side of a grading run: start a worker process, follow its reports, enforce time limits.

The parent never launches the learner's kernel. A kernel that faults ends only the worker; one that hangs
is stopped by killing the worker when the step it is in runs past its time limit (each case has its own;
an overall limit covers everything, start-up and compile included). Either way the parent builds a
RunResult from what the worker reported before, and the next run starts a fresh worker. The messages are
the dataclasses of `messages`.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import time

from . import worker
from .messages import CaseDone, CompileFailed, Done, Fault, GraderError, SpeedDone, Stage, Unsupported
from .verdict import ERROR, FAULT, NOTRUN, SKIPPED, TIMEOUT, CaseResult, RunResult, SpeedResult
from .worker import DEFAULT_BUDGETS


def _fmt_s(s: float) -> str:
    return f"{s:.0f} s"


def run_task(task, source: str, cases, *, speed: bool, total_timeout: float | None = None,
             budgets: dict | None = None, target=None, device=None) -> RunResult:
    """Grade `source` for `task` on `cases` (tasks.Case) in a spawned worker; never raises for anything
    the learner's code does. `device`: the CUDA_VISIBLE_DEVICES of the worker (one GPU); `target` replaces
    the worker's entry point (tests)."""
    budgets = {**DEFAULT_BUDGETS, **(budgets or {})}
    result = RunResult(task.id, [CaseResult(c.label, c.hidden, c.role) for c in cases])
    request = {"task": task.id, "source": source, "speed": speed, "budgets": budgets, "device": device,
               "cases": [dataclasses.asdict(c) for c in cases]}
    mp = multiprocessing.get_context("spawn")
    recv, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=target or worker.main, args=(send, request), daemon=True, name=f"labkit-grade-{task.id}")
    start = time.monotonic()
    end_total = start + total_timeout if total_timeout else float("inf")
    stage, index, limit = "startup", None, budgets["startup"]
    stage_end = start + limit
    proc.start()
    send.close()
    try:
        while True:
            now = time.monotonic()
            wait = min(stage_end, end_total) - now
            if wait <= 0 or not recv.poll(wait):
                overall = end_total <= stage_end
                _time_out(result, stage, index, limit, total_timeout if overall else None)
                break
            try:
                msg = recv.recv()
            except (EOFError, OSError):
                proc.join(5)
                _died(result, stage, index, proc.exitcode)
                break
            if isinstance(msg, Stage):
                stage, index, limit = msg.kind, msg.index, msg.seconds
                stage_end = time.monotonic() + limit
            elif isinstance(msg, CompileFailed):
                result.compile_error = msg.message
                break
            elif isinstance(msg, Unsupported):
                result.crash = msg.message
                _not_run(result, None, "this GPU cannot run the exercise")
                break
            elif isinstance(msg, CaseDone):
                c = result.cases[msg.index]
                c.status, c.detail = msg.status, msg.detail
                if stage in ("case", "check") and index == msg.index:
                    stage = "between"               # until the worker names its next step
            elif isinstance(msg, SpeedDone):
                result.speed = SpeedResult(**dataclasses.asdict(msg))
            elif isinstance(msg, Fault):
                if msg.index is None:
                    result.speed = SpeedResult("fault", detail=f"CRASH while timing: {msg.message}")
                else:
                    result.cases[msg.index].status, result.cases[msg.index].detail = FAULT, msg.message
                _not_run(result, msg.index, "after the crash above")
                break
            elif isinstance(msg, GraderError):
                text = msg.traceback
                last = text.strip().splitlines()[-1] if text.strip() else "unknown"
                if msg.index is None:
                    result.crash = f"grader error (please report it): {last}"
                else:
                    result.cases[msg.index].status = ERROR
                    result.cases[msg.index].detail = f"please report it: {last}"
                    _not_run(result, msg.index, "after the grader error above")
                break
            elif isinstance(msg, Done):
                break
            else:
                result.crash = f"grader error (please report it): unknown worker message {type(msg).__name__}"
                break
    finally:
        recv.close()
        if proc.is_alive():
            proc.join(2)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    return result


def _not_run(result: RunResult, after, why: str):
    for c in result.cases[(after + 1 if after is not None else len(result.cases)):]:
        if c.status == NOTRUN:
            c.detail = why


def _time_out(result: RunResult, stage: str, index, limit: float, overall: float | None):
    why = (f"the submission's time limit ({_fmt_s(overall)}) ran out" if overall
           else f"no result within {_fmt_s(limit)}")
    if stage == "case":
        result.cases[index].status = TIMEOUT
        result.cases[index].detail = why + ("; the kernel was stopped" if not overall else "")
        _not_run(result, index, "after the time limit above")
    elif stage == "speed":
        result.speed = SpeedResult("timeout", detail=f"TIME LIMIT while timing: {why}")
    elif stage == "between":
        _not_run(result, index, why)
    elif stage in ("prepare", "check"):         # the grader's own work around a launch: never the learner's
        result.cases[index].status = SKIPPED
        result.cases[index].detail = (f"not graded: the grader's {'inputs and reference' if stage == 'prepare' else 'check'}"
                                      f" took too long ({why}); grade again")
        _not_run(result, index, "after the grader's time-out above")
    elif stage == "compile":
        result.compile_error = f"compiling took too long: {why}"
    else:
        result.crash = f"the grading worker did not start: {why}"
        _not_run(result, None, why)


def _died(result: RunResult, stage: str, index, exitcode):
    why = f"the grading worker died (exit code {exitcode})"
    if stage == "case":
        result.cases[index].status = FAULT
        result.cases[index].detail = why + " while running the kernel"
        _not_run(result, index, "after the crash above")
    elif stage == "speed":
        result.speed = SpeedResult("fault", detail=f"CRASH while timing: {why}")
    elif stage == "between":
        _not_run(result, index, why)
    elif stage == "compile":
        result.compile_error = f"{why} while compiling or loading the module (the learner's source)"
    else:
        result.crash = f"{why} during {stage}"
