"""The worker process protocol on the CPU: a worker that hangs is stopped at the time limit, one that dies
is reported, and what a worker reported before either is kept. (The real worker needs a GPU; these fake
ones speak the same protocol.)"""
from __future__ import annotations

import os
import time

from labkit.grading import tasks as T
from labkit.grading.runner import run_task

TASK = T.get("01.copy_probe")
CASES = TASK.cases([0, 1, 3])


def _fast_budgets(**kw):
    return {"startup": 20.0, "compile": 5.0, "case": 1.0, "speed": 1.0, **kw}


def worker_ok(conn, req):
    conn.send(("stage", "compile", None, 5.0))
    for i, _ in enumerate(req["cases"]):
        conn.send(("stage", "case", i, 1.0))
        conn.send(("case", i, "ok", ""))
    conn.send(("done",))


def worker_hangs_on_second(conn, req):
    conn.send(("stage", "case", 0, req["budgets"]["case"]))
    conn.send(("case", 0, "ok", ""))
    conn.send(("stage", "case", 1, req["budgets"]["case"]))
    time.sleep(60)


def worker_dies_on_second(conn, req):
    conn.send(("stage", "case", 0, 1.0))
    conn.send(("case", 0, "ok", ""))
    conn.send(("stage", "case", 1, 1.0))
    os._exit(3)


def worker_faults(conn, req):
    conn.send(("stage", "case", 0, 1.0))
    conn.send(("fault", 0, "the kernel crashed: cudaErrorMisalignedAddress: misaligned address"))


def worker_compile_error(conn, req):
    conn.send(("stage", "compile", None, 5.0))
    conn.send(("compile_error", "kernel.cu line 3: expected a \";\""))


def worker_slow_start(conn, req):
    time.sleep(60)


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
