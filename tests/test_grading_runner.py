"""The worker process protocol on the CPU: a worker that hangs is stopped at the time limit, one that dies
is reported, and what a worker reported before either is kept. (The real worker needs a GPU; these fake
ones speak the same protocol: the dataclasses of labkit.grading.messages.)"""
from __future__ import annotations

import dataclasses
import os
import time

from labkit.grading import messages as M
from labkit.grading import tasks as T
from labkit.grading.supervisor import run_task

TASK = T.get("01.copy_probe")
CASES = TASK.cases([0, 1, 3])


def _fast_budgets(**kw):
    return {"startup": 20.0, "compile": 5.0, "case": 1.0, "speed": 1.0, **kw}


def worker_ok(conn, req):
    conn.send(M.Stage("compile", None, 5.0))
    for i, _ in enumerate(req["cases"]):
        conn.send(M.Stage("case", i, 1.0))
        conn.send(M.CaseDone(i, "ok"))
    conn.send(M.Done())


def worker_hangs_on_second(conn, req):
    conn.send(M.Stage("case", 0, req["budgets"]["case"]))
    conn.send(M.CaseDone(0, "ok"))
    conn.send(M.Stage("case", 1, req["budgets"]["case"]))
    time.sleep(60)


def worker_dies_on_second(conn, req):
    conn.send(M.Stage("case", 0, 1.0))
    conn.send(M.CaseDone(0, "ok"))
    conn.send(M.Stage("case", 1, 1.0))
    os._exit(3)


def worker_faults(conn, req):
    conn.send(M.Stage("case", 0, 1.0))
    conn.send(M.Fault(0, "the kernel crashed: cudaErrorMisalignedAddress: misaligned address"))


def worker_compile_error(conn, req):
    conn.send(M.Stage("compile", None, 5.0))
    conn.send(M.CompileFailed("kernel.cu line 3: expected a \";\""))


def worker_compile_hangs(conn, req):
    conn.send(M.Stage("compile", None, 1.0))
    time.sleep(60)


def worker_slow_start(conn, req):
    time.sleep(60)


def worker_not_graded_then_ok(conn, req):
    conn.send(M.CaseDone(2, "skipped", "n=3 needs about 90.0 GB of GPU memory, 80.0 GB are free on this GPU"))
    conn.send(M.Stage("compile", None, 5.0))
    for i in (0, 1):
        conn.send(M.Stage("case", i, 1.0))
        conn.send(M.CaseDone(i, "ok"))
    conn.send(M.Done())


def worker_sees_device(conn, req):
    conn.send(M.CaseDone(0, "ok", str(req["device"])))
    conn.send(M.Done())


def test_messages_are_typed_dataclasses():
    for cls in M.MESSAGES:
        assert dataclasses.is_dataclass(cls)
    assert M.Stage("case", 2, 1.5) == M.Stage(kind="case", index=2, seconds=1.5)


def test_all_cases_reported():
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(), target=worker_ok)
    assert [c.status for c in r.cases] == ["ok", "ok", "ok"] and r.crash is None


def test_hang_is_stopped_at_the_case_limit():
    t = time.monotonic()
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(), target=worker_hangs_on_second)
    assert time.monotonic() - t < 15
    assert [c.status for c in r.cases] == ["ok", "timeout", "notrun"]
    assert r.cases[1].detail == "no result within 1 s; the kernel was stopped"
    assert r.cases[2].detail == "after the time limit above"


def test_overall_time_limit():
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(case=30.0), total_timeout=2.0,
                 target=worker_hangs_on_second)
    assert r.cases[1].status == "timeout" and "the submission's time limit (2 s) ran out" in r.cases[1].detail


def test_overall_time_limit_covers_startup():
    t = time.monotonic()
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(startup=60.0), total_timeout=2.0,
                 target=worker_slow_start)
    assert time.monotonic() - t < 15 and "time limit (2 s) ran out" in r.crash


def test_death_is_reported():
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(), target=worker_dies_on_second)
    assert [c.status for c in r.cases] == ["ok", "fault", "notrun"]
    assert "the grading worker died (exit code 3)" in r.cases[1].detail


def test_fault_and_compile_error_and_startup():
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(), target=worker_faults)
    assert r.cases[0].status == "fault" and "misaligned" in r.cases[0].detail
    assert r.cases[1].detail == "after the crash above"
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(), target=worker_compile_error)
    assert r.compile_error.startswith("kernel.cu line 3")
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(startup=1.0), target=worker_slow_start)
    assert r.crash == "the grading worker did not start: no result within 1 s"


def test_a_compile_that_never_ends_is_the_learners_problem():
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(), target=worker_compile_hangs)
    assert r.crash is None and r.compile_error == "compiling took too long: no result within 1 s"


def test_not_graded_cases_are_kept():
    r = run_task(TASK, "src", CASES, speed=False, budgets=_fast_budgets(), target=worker_not_graded_then_ok)
    assert [c.status for c in r.cases] == ["ok", "ok", "skipped"] and "90.0 GB" in r.cases[2].detail


def test_device_reaches_the_worker():
    r = run_task(TASK, "src", CASES[:1], speed=False, budgets=_fast_budgets(), target=worker_sees_device,
                 device="3")
    assert r.cases[0].detail == "3"
