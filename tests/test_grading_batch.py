"""The instructor's batch grader with a fake worker result injected: points, reasons, crash and timeout
rows, unreadable submissions, and a grader bug in one submission that does not stop the batch."""
from __future__ import annotations

import csv
import json

from labkit.grading import cli
from labkit.grading import release as N
from labkit.grading.batch import grade_batch
from labkit.grading.verdict import CaseResult, RunResult, SpeedResult
from labkit.paths import LABS


def student_nb(chapter, **cells):
    nb = json.loads(next(LABS.glob(f"{chapter}-*/{N.STUDENT_NAME}")).read_text())
    for var, value in cells.items():
        nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"x-{var}", "metadata": {},
                            "outputs": [], "source": f"{var} = {value!r}\n"})
    return nb


def fake_runner(task, source, cases, *, speed, total_timeout=None, device=None):
    """The source says what happened: 'GOOD', 'WRONG', 'CRASH', 'HANG', 'SLOW', 'BROKEN', 'BUG'."""
    calls.append((task.id, source, [c.label for c in cases], speed, total_timeout))
    res = RunResult(task.id, [CaseResult(c.label, c.hidden, c.role) for c in cases])
    if source == "BUG":
        raise RuntimeError("grader bug")
    if source == "BROKEN":
        res.compile_error = 'kernel.cu line 2: expected a ";"\n    2 | y = x'
        return res
    for i, c in enumerate(res.cases):
        c.status = "ok"
        if source == "WRONG" and c.hidden and c.label == "n=2147483651":
            c.status, c.detail = "wrong", "3 of 2147483651 output elements never written; first: [2147483648]"
        if source == "CRASH" and i == 1:
            c.status, c.detail = "fault", "the kernel crashed: cudaErrorIllegalAddress: an illegal memory access"
            for d in res.cases[2:]:
                d.status, d.detail = "notrun", "after the crash above"
            break
        if source == "HANG" and i == 1:
            c.status, c.detail = "timeout", "no result within 10 s; the kernel was stopped"
            for d in res.cases[2:]:
                d.status, d.detail = "notrun", "after the time limit above"
            break
    if speed and source in ("GOOD", "SLOW"):
        ms = 0.27 if source == "GOOD" else 0.61
        res.speed = SpeedResult("measured", "s", kernel_ms=ms, copy_ms=0.26, bytes=8 * 2 ** 27)
    return res


calls: list = []


def make_submissions(tmp_path):
    subs = tmp_path / "subs"
    right = {"add_bytes": 3 * 2 * 2 ** 28, "add_flop_per_byte": 1 / 6, "add_floor_us": 335.5,
             "gemm_flops": 2 * 4096 ** 3, "gemm_bytes": 3 * 4096 ** 2 * 2, "gemm_flop_per_byte": 1365.33,
             "gemm_compute_bound": 1, "softmax_bytes": 2 * 4 * 8192 ** 2}
    notebooks = {
        "alice/exercises.ipynb": student_nb("01", copy_probe_src="GOOD", roofline_answers=right),
        "bob/exercises.ipynb": student_nb("01", copy_probe_src="SLOW", roofline_answers={**right, "add_bytes": 1}),
        "carol/exercises.ipynb": student_nb("01", copy_probe_src="CRASH"),
        "dave/exercises.ipynb": student_nb("01", copy_probe_src="HANG"),
        "erin/exercises.ipynb": student_nb("02", add_bf16_src="WRONG", bias_cols_src="BROKEN"),
        "frank/exercises.ipynb": student_nb("01", copy_probe_src="BUG"),
    }
    for name, nb in notebooks.items():
        (subs / name).parent.mkdir(parents=True, exist_ok=True)
        (subs / name).write_text(json.dumps(nb))
    (subs / "grace").mkdir()
    (subs / "grace" / "exercises.ipynb").write_text("{not json")
    nometa = student_nb("01", copy_probe_src="GOOD")
    del nometa["metadata"]["labkit"]
    (subs / "heidi").mkdir()
    (subs / "heidi" / "exercises.ipynb").write_text(json.dumps(nometa))
    (subs / "alice" / ".ipynb_checkpoints").mkdir()
    (subs / "alice" / ".ipynb_checkpoints" / "exercises-checkpoint.ipynb").write_text("{}")
    return subs


def test_csv_points_and_reasons(tmp_path):
    calls.clear()
    subs = make_submissions(tmp_path)
    out = tmp_path / "grades.csv"
    rows = grade_batch(subs, out, timeout=100, runner=fake_runner, progress=False, feedback=tmp_path / "fb")
    table = list(csv.DictReader(out.open()))
    assert len(table) == len(rows)
    # a cell that starts with "-" (every lost-points list) is written with a leading apostrophe: no formula
    assert all(r["lost"][:1] in ("", "'", "n", "r", "g") for r in table), [r["lost"][:3] for r in table]
    by = {(r["submission"].split("/")[0], r["exercise"]): {**r, "lost": r["lost"].removeprefix("'")} for r in table}

    assert by["alice", "01.copy_probe"]["points"] == "6" and by["alice", "01.copy_probe"]["lost"] == ""
    assert by["alice", "01.numbers"]["points"] == "8"
    assert by["alice", "TOTAL"]["points"] == "14" and by["alice", "TOTAL"]["max_points"] == "14"

    bob = by["bob", "01.copy_probe"]
    assert bob["points"] == "4" and bob["lost"].startswith("-2 speed: 4") and "needs 85%" in bob["lost"]
    assert by["bob", "01.numbers"]["points"] == "7" and by["bob", "01.numbers"]["lost"].startswith("-1 add_bytes:")

    carol = by["carol", "01.copy_probe"]
    assert carol["points"] == "0"
    lost = carol["lost"].split(" | ")
    assert lost[0] == ("-3 correctness: n=1: CRASH: the kernel crashed: cudaErrorIllegalAddress: an illegal "
                       "memory access (and 4 more)")
    assert lost[1].startswith("-1 hidden tests: n=7: not run: after the crash above")
    assert lost[2] == "-2 speed: not measured (the kernel is not correct)"
    assert "hidden tests:" in carol["lost"]
    assert by["carol", "01.numbers"]["lost"].startswith("-1 add_bytes: no answer | -1 add_flop_per_byte")

    assert "TIME LIMIT: no result within 10 s" in by["dave", "01.copy_probe"]["lost"]

    erin = by["erin", "02.add_any_n"]
    assert erin["points"] == "3" and erin["max_points"] == "5"          # no speed points in this exercise
    assert erin["lost"] == ("-2 hidden tests: n=2147483651: FAIL: 3 of 2147483651 output elements never written; "
                            "first: [2147483648]")
    assert by["erin", "02.bias_cols"]["lost"].startswith('-4 compile error: kernel.cu line 2: expected a ";"')

    # a grader bug costs the exercise it happened in, not the submission: the numbers are still graded
    assert by["frank", "01.copy_probe"]["lost"] == "grader error (please report it): RuntimeError: grader bug"
    assert by["frank", "01.numbers"]["max_points"] == "8" and ("frank", "TOTAL") in by
    assert "not a readable notebook" in by["grace", ""]["lost"]
    assert "no metadata.labkit.exercises" in by["heidi", ""]["lost"]
    ck = [r for r in table if "checkpoint" in r["submission"]]        # listed, with the reason, not graded
    assert len(ck) == 1 and ck[0]["lost"].startswith("not graded: a Jupyter checkpoint") and ck[0]["points"] == "0"

    # the hidden shapes came from the solution notebook, the public ones from the task
    alice_call = next(c for c in calls if c[1] == "GOOD")
    assert "hidden" not in " ".join(alice_call[2][:6]) and "n=2147483653" in alice_call[2]
    assert alice_call[3] is True and 0 < alice_call[4] <= 100
    erin_call = next(c for c in calls if c[1] == "WRONG")
    assert erin_call[3] is False                                       # no speed points: not timed
    from labkit.grading.batch import feedback_name
    assert (tmp_path / "fb" / feedback_name("carol/exercises.ipynb")).read_text().count("CRASH") >= 1


def test_time_limit_per_submission(tmp_path):
    subs = make_submissions(tmp_path)
    rows = grade_batch(subs, None, timeout=0, runner=fake_runner, progress=False)
    alice = next(r for r in rows if r.submission.startswith("alice") and r.exercise == "01.copy_probe")
    assert alice.points == 0 and "time limit (0 s) ran out before this exercise" in alice.lost[0]


def test_cli_grade_and_release_check(tmp_path, monkeypatch, capsys):
    subs = make_submissions(tmp_path)
    import labkit.grading.batch as B
    real = B.grade_batch
    monkeypatch.setattr(B, "grade_batch", lambda *a, **k: real(*a, **{**k, "runner": fake_runner, "progress": False}))
    monkeypatch.setattr(B, "visible_devices", lambda: ["0"])
    out = tmp_path / "g.csv"
    assert cli.main(["grade", str(subs), "--csv", str(out), "--timeout", "50", "--no-speed"]) == 0
    rows = list(csv.DictReader(out.open()))
    assert {r["submission"].split("/")[0] for r in rows} == {"alice", "bob", "carol", "dave", "erin", "frank",
                                                              "grace", "heidi"}
    alice = next(r for r in rows if r["submission"].startswith("alice") and r["exercise"] == "01.copy_probe")
    assert alice["max_points"] == "4"                                  # --no-speed: no speed points
    assert "graded 6 of 9 file(s) on 1 GPU(s), seed " in capsys.readouterr().out
    assert cli.main(["release", "--check"]) == 0


def test_register_adds_the_verbs():
    import argparse
    p = argparse.ArgumentParser()
    cli.register(p.add_subparsers(dest="verb"))
    a = p.parse_args(["grade", "subs", "--csv", "g.csv", "--timeout", "30", "--seed", "7", "--shard", "1/4",
                      "--chapter", "03", "--gpus", "2"])
    assert a.func is cli.cmd_grade and a.timeout == 30.0 and a.seed == 7 and a.shard == "1/4" and a.gpus == 2
    a = p.parse_args(["grade", "--merge", "a.csv", "b.csv", "--csv", "out.csv"])
    assert a.merge == ["a.csv", "b.csv"] and a.submissions is None
    a = p.parse_args(["release", "03", "--check"])
    assert a.func is cli.cmd_release and a.chapters == ["03"] and a.check
    assert p.parse_args(["release", "--student-tree", "out"]).student_tree == "out"
