"""Grader integrity on the CPU: what a submission can hold (any bytes, links, odd cells, huge numbers,
hostile #includes) is refused or named as the learner's problem, never a crash of the batch; hidden tests
are drawn from the instructor's seed; the batch splits into shards that merge into one run's CSV; the
registry discovers grading modules; no GPU means no grades. A fake runner stands in for the GPU worker."""
from __future__ import annotations

import ast
import csv
import json
import os
import sys
import textwrap
import time

import pytest

from labkit.grading import batch as B
from labkit.grading import cli
from labkit.grading import extract as X
from labkit.grading import nbio
from labkit.grading import release as R
from labkit.grading import tasks as T
from labkit.grading.sources import source_problem
from labkit.grading.verdict import CaseResult, RunResult, SpeedResult, score
from labkit.paths import LABS, ROOT

RIGHT_01 = {"add_bytes": 3 * 2 * 2 ** 28, "add_flop_per_byte": 1 / 6, "add_floor_us": 335.5,
            "gemm_flops": 2 * 4096 ** 3, "gemm_bytes": 3 * 4096 ** 2 * 2, "gemm_flop_per_byte": 1365.33,
            "gemm_compute_bound": 1, "softmax_bytes": 2 * 4 * 8192 ** 2}


def student_nb(chapter, **cells):
    nb = json.loads(next(LABS.glob(f"{chapter}-*/{R.STUDENT_NAME}")).read_text())
    for var, value in cells.items():
        nb["cells"].append({"cell_type": "code", "execution_count": None, "id": f"x-{len(nb['cells'])}",
                            "metadata": {}, "outputs": [], "source": f"{var} = {value!r}\n"})
    return nb


def write_nb(path, nb):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8", errors="surrogateescape")


calls: list = []


def fake_runner(task, source, cases, *, speed, total_timeout=None, device=None):
    calls.append({"task": task.id, "source": source, "cases": cases, "device": device})
    res = RunResult(task.id, [CaseResult(c.label, c.hidden, c.role, status="ok") for c in cases])
    if speed:
        res.speed = SpeedResult("measured", "s", kernel_ms=0.27, copy_ms=0.26, bytes=8 * 2 ** 27)
    return res


def csv_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------- registry (TASKS)

def test_a_throwaway_grading_module_is_discovered(tmp_path, monkeypatch):
    import labkit.grading as G
    (tmp_path / "ch99.py").write_text(textwrap.dedent('''
        from labkit.grading.tasks import NumericTask, Question
        numbers = NumericTask(id="99.numbers", title="t", answers_var="a",
                              questions=[Question("k", "p", 1.0, "h")])
        TASKS = (numbers,)
    '''))
    (tmp_path / "notes.py").write_text("raise RuntimeError('not a grading module: never imported')\n")
    monkeypatch.setattr(G, "__path__", list(G.__path__) + [str(tmp_path)])
    T.reset()
    try:
        assert "ch99" in T.modules() and "notes" not in T.modules()
        assert T.get("99.numbers").title == "t" and [t.id for t in T.for_chapter("99")] == ["99.numbers"]
        assert "01.copy_probe" in T.all_tasks()
    finally:
        T.reset()
        sys.modules.pop("labkit.grading.ch99", None)


def test_chapter_modules_export_tasks_and_do_not_register():
    import importlib
    for name in T.modules():
        mod = importlib.import_module(f"labkit.grading.{name}")
        assert isinstance(mod.TASKS, tuple) and mod.TASKS
        assert not hasattr(mod, "register")
    assert not hasattr(T, "register") and not hasattr(T, "CHAPTER_MODULES")


# -------------------------------------------------------------------------- 4. hidden tests hidden

@pytest.mark.parametrize("task_id", [t for t, v in T.all_tasks().items() if isinstance(v, T.KernelTask)])
def test_hidden_shapes_come_from_the_seed(task_id):
    task = T.get(task_id)
    a, b = task.draw_hidden(1), task.draw_hidden(2)
    assert a == task.draw_hidden(1) and a, "the same seed draws the same shapes"
    assert a != b, "another seed draws other shapes"
    for s in a:
        assert isinstance(s, type(T.norm_shape(task.shapes[0])))
    assert {c.seed for c in task.hidden_cases(1)} != {c.seed for c in task.hidden_cases(2)}   # inputs too


def test_hidden_shapes_hold_the_edge_cases():
    big = lambda t: any(T.get(t).elements(s) > 2 ** 31 for s in T.get(t).draw_hidden(5))  # noqa: E731
    for t in ("01.copy_probe", "02.add_any_n", "03.vec_add", "03.bias_gelu", "04.rmsnorm"):
        assert big(t), f"{t}: no shape past 2^31 elements (64-bit indexing)"
    assert 7 in T.get("01.copy_probe").draw_hidden(3)                # a prime
    assert any(s % 8 for s in T.get("03.vec_add").draw_hidden(3))   # a tail


def test_the_batch_draws_hidden_shapes_from_its_seed_not_the_solution_notebook(tmp_path):
    subs = tmp_path / "subs"
    write_nb(subs / "a" / "exercises.ipynb", student_nb("01", copy_probe_src="GOOD", roofline_answers=RIGHT_01))
    calls.clear()
    B.grade_batch(subs, tmp_path / "g.csv", seed=11, runner=fake_runner, progress=False)
    B.grade_batch(subs, tmp_path / "h.csv", seed=12, runner=fake_runner, progress=False)
    h11 = [c.label for c in calls[0]["cases"] if c.hidden]
    h12 = [c.label for c in calls[1]["cases"] if c.hidden]
    assert h11 == [c.label for c in T.get("01.copy_probe").hidden_cases(11)] and h11 != h12
    assert {r["seed"] for r in csv_rows(tmp_path / "g.csv")} == {"11"}
    # no seed: $LABKIT_GRADE_SEED, else a random one, written down
    assert B.resolve_seed(None) > 0 and B.resolve_seed("42") == 42


def test_student_tree_has_no_solutions_and_no_hidden_generators(tmp_path):
    files = R.student_tree(ROOT, tmp_path / "class")
    names = {p.name for p in files}
    assert R.SOLUTION_NAME not in names and R.STUDENT_NAME in names
    assert not (tmp_path / "class" / "tests").exists() and not (tmp_path / "class" / ".git").exists()
    ch01 = (tmp_path / "class" / "labkit" / "grading" / "ch01.py").read_text()
    assert "2 ** 31 + 5" not in ch01 and "hidden shapes: the instructor's copy only" in ch01
    ast.parse(ch01)
    for p in files:
        if p.suffix == ".ipynb":
            text = p.read_text(encoding="utf-8")
            assert "BEGIN HIDDEN" not in text and "BEGIN SOLUTION" not in text
    with pytest.raises(nbio.NotebookFormatError):
        R.student_tree(ROOT, ROOT / "labs" / "inside")


# -------------------------------------------------------------------------- 2. the physical floor

def test_physical_floor_and_a_faster_time_is_an_error():
    from labkit.grading.worker import physical_floor
    task = T.get("01.copy_probe")
    ms, why = physical_floor(task, 2 ** 27, "NVIDIA H200")
    assert ms == pytest.approx(8 * 2 ** 27 / 4800e9 * 1e3) and "H200 datasheet" in why
    ms_unknown, why = physical_floor(task, 2 ** 27, "Some Future GPU")
    assert 0 < ms_unknown < ms and "generous" in why
    gelu = T.get("03.bias_gelu")
    assert physical_floor(gelu, (8192, 8192), "NVIDIA H200")[0] > 0
    cases = task.cases(speed=True)
    res = RunResult(task.id, [CaseResult(c.label, c.hidden, c.role, "ok") for c in cases],
                    speed=SpeedResult("error", detail="not measured: a timed launch took 0.0010 ms, less than "
                                                      "the physical floor of the work"))
    v = score(task, res, speed_requested=True)
    assert v.points == 3 and "-2 speed: not measured: a timed launch took" in v.lost[0]


# ---------------------------------------------------------------------------- 3. memory estimates

def test_case_memory_covers_the_peak():
    from labkit.grading.worker import HOST_LIMIT, case_memory
    from labkit.measure.checks import PAD_BYTES
    assert PAD_BYTES == 64 << 10
    vec = T.get("03.vec_add")
    n = 2 ** 31 + 11
    case = vec.cases([n], hidden=True)[0]
    need = case_memory(vec, case)
    inputs, out = 2 * 2 * n, 2 * n
    # inputs and their pristine copies, output and pads, the decoded inputs and the float32 reference
    assert need >= 2 * inputs + out + 2 * PAD_BYTES + 4 * 2 * n + 4 * n
    small = vec.cases([1000])[0]
    assert case_memory(vec, small) < 1 << 30
    speed = vec.cases(speed=True)[-1]
    assert case_memory(vec, speed, speed=True) > case_memory(vec, speed) + vec.bytes_moved(speed.shape) - 1
    assert T.get("04.rmsnorm").elements((1, 100003)) <= HOST_LIMIT


# ----------------------------------------------------------------------------- 5. hard inputs

def test_special_values_are_planted_everywhere():
    from labkit.grading import ch01, ch02, ch03
    import math
    for specials in (ch01.SPECIALS, ch02.SPECIALS_X, ch03.SPECIALS_X):
        assert any(math.isnan(v) for v in specials) and float("inf") in specials
    assert T.bits_of(float("nan"), "bf16") == 0x7FC0 and T.bits_of(1.0, "bf16") == 0x3F80
    assert T.bits_of(-0.0, "f32") == 0x80000000


# --------------------------------------------------------------------- 6. what is graded, and where

def test_chapter_option_wins_over_metadata_and_is_flagged(tmp_path):
    subs = tmp_path / "subs"
    nb = student_nb("02", roofline_answers=RIGHT_01, copy_probe_src="GOOD")
    write_nb(subs / "a" / "exercises.ipynb", nb)
    rows = B.grade_batch(subs, None, seed=1, runner=fake_runner, progress=False, chapter="01")
    by = {r.exercise: r for r in rows}
    assert "01.numbers" in by and by["01.numbers"].points == 8
    assert "the notebook's metadata names chapter '02'; graded as chapter 01 (--chapter)" in by["01.numbers"].notes


def test_links_and_paths_outside_are_refused(tmp_path):
    outside = tmp_path / "outside"
    write_nb(outside / "exercises.ipynb", student_nb("01"))
    subs = tmp_path / "subs"
    write_nb(subs / "ok" / "exercises.ipynb", student_nb("01"))
    (subs / "link").mkdir()
    os.symlink(outside / "exercises.ipynb", subs / "link" / "exercises.ipynb")
    os.symlink(outside, subs / "linkdir")
    rows = B.grade_batch(subs, tmp_path / "g.csv", seed=1, runner=fake_runner, progress=False)
    got = {r.submission: r.lost for r in rows if r.exercise in ("", "TOTAL")}
    assert got["link/exercises.ipynb"] == ["refused: a symbolic link (submit the notebook file itself)"]
    assert got["linkdir"][0].startswith("refused: a symbolic link to a folder")
    assert "ok/exercises.ipynb" in got


def test_every_file_considered_is_in_the_csv(tmp_path):
    subs = tmp_path / "subs"
    for name in ("a/EXERCISES.IPYNB", "b/exercises.solution.ipynb", "c/.ipynb_checkpoints/exercises-checkpoint.ipynb",
                 "d/exercises.ipynb"):
        write_nb(subs / name, student_nb("01"))
    rows = csv_rows(B.grade_batch(subs, tmp_path / "g.csv", seed=1, runner=fake_runner, progress=False)
                    and tmp_path / "g.csv")
    why = {r["submission"]: r["lost"] for r in rows if r["exercise"] == ""}
    assert why["a/EXERCISES.IPYNB"].startswith("not graded: the name does not end in .ipynb")
    assert why["b/exercises.solution.ipynb"].startswith("not graded: a solution notebook")
    assert why["c/.ipynb_checkpoints/exercises-checkpoint.ipynb"].startswith("not graded: a Jupyter checkpoint")
    assert any(r["submission"] == "d/exercises.ipynb" and r["exercise"] == "TOTAL" for r in rows)


# ---------------------------------------------------------------- 7. any bytes, written safely

def test_hostile_names_keys_and_metadata_do_not_end_the_batch(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    weird = [b"=HYPERLINK(1)", b"+1", b"-2", b"@SUM", b"\tx", b"bad\xff\xfeutf8", b"ctl\x01\x1b[31m",
             b"x" * 240]
    for w in weird:
        d = os.path.join(os.fsencode(subs), w)
        os.makedirs(d, exist_ok=True)
        nb = student_nb("01", copy_probe_src="GOOD\ud800\x00", roofline_answers={"=cmd|' /C calc'!A0": 1,
                                                                              "\ud800": 2, "add_bytes": 10 ** 400})
        nb["metadata"]["labkit"]["junk"] = "\ud800\x07"
        with open(os.path.join(d, b"exercises.ipynb"), "wb") as f:
            f.write(json.dumps(nb).encode())
    fb = tmp_path / "fb"
    rows = B.grade_batch(subs, tmp_path / "g.csv", seed=1, runner=fake_runner, progress=False, feedback=fb)
    table = csv_rows(tmp_path / "g.csv")
    assert len(table) == len(rows) and sum(r["exercise"] == "TOTAL" for r in table) == len(weird)
    for r in table:
        for k in ("submission", "chapter", "exercise", "lost", "notes"):
            v = r[k]
            assert v[:1] not in ("=", "+", "-", "@", "\t", "\r"), (k, v)
            assert not any(ord(ch) < 32 for ch in v), (k, v)
            assert len(v) <= B.MAX_CELL_CHARS + 20
    names = sorted(p.name for p in fb.iterdir())
    assert len(names) == len(weird) and all(len(n) <= 100 for n in names)
    assert all(n.isascii() for n in names)


def test_safe_cell_rules():
    assert B.safe_cell("=1+1") == "'=1+1" and B.safe_cell("-3 correctness") == "'-3 correctness"
    assert B.safe_cell("ok") == "ok" and B.safe_cell("a\nb") == "a / b"
    assert B.safe_cell("\ud800") == "\\ud800" and B.safe_cell("\x1b") == "\\x1b"
    assert B.feedback_name("a/b.ipynb") != B.feedback_name("a__b.ipynb")


# ------------------------------------------------------------------------------- 8. every step bounded

@pytest.mark.parametrize("expr", ["10**10**10", "2**100000", "1 << 10**9", "(2**4000) * (2**4000)", "'a' * 10**9",
                                  "9**9**9**9", "-" * 50000 + "1", "(" * 5000 + "1" + ")" * 5000,
                                  "1.5 ** 10**9", "(1 << 4000) << 200"])
def test_answers_are_evaluated_with_bounds(expr):
    t = time.monotonic()
    nb = {"cells": [{"cell_type": "code", "source": f"ans = {{'a': {expr}, 'b': 3}}"}], "metadata": {}}
    try:
        got = X.extract_answers(nb, "09.numbers", "ans")
    except X.Missing:
        got = {}                                     # a cell Python itself cannot parse: not read at all
    assert time.monotonic() - t < 2
    if got:
        assert isinstance(got["a"], X.NotStatic) and got["b"] == 3


def test_reading_is_bounded_and_regular_files_only(tmp_path):
    fifo = tmp_path / "pipe.ipynb"
    os.mkfifo(fifo)
    t = time.monotonic()
    with pytest.raises(nbio.NotebookFormatError, match="not a regular file"):
        nbio.read_notebook(fifo)
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * 100)
    with pytest.raises(nbio.NotebookFormatError, match="more than"):
        nbio.read_notebook(big, limit=10)
    with pytest.raises(nbio.NotebookFormatError, match="not a readable notebook"):
        nbio.parse_notebook(b"[" * 100000 + b"]" * 100000)
    with pytest.raises(nbio.NotebookFormatError, match="not UTF-8"):
        nbio.parse_notebook(b'{"cells": "\xff"}')
    assert time.monotonic() - t < 5


@pytest.mark.parametrize("src, words", [
    ('#include "/dev/zero"', "absolute path"),
    ('#include </proc/self/fd/0>', "absolute path"),
    ('#include "../../../../dev/zero"', "'..' is not allowed"),
    ('#  /* c */ include "/dev/zero"', "absolute path"),
    ('#inc\\\nlude "/dev/zero"', "absolute path"),
    ('%:include "/dev/zero"', "absolute path"),
    ('#define F "/dev/zero"\n#include F', "a macro or any other form"),
    ('#include "dev/zero"', "not a header of the course"),
    ('#include_next <cuda_bf16.h>', "#include_next is not allowed"),
    ('int x = 1; // \ud800', "cannot be encoded as UTF-8"),
    ("int a;\x00", "NUL"),
])
def test_hostile_sources_are_refused_before_compiling(src, words):
    assert words in (source_problem(src) or ""), source_problem(src)


def test_course_and_cuda_headers_are_allowed():
    assert source_problem('#include <cuda_bf16.h>\n#include "common/reductions.cuh"\n'
                          '// #include "/dev/zero" in a comment\nconst char* s = "#include </dev/zero>";') is None


# ---------------------------------------------------------------------- 9. learner's mistakes named

def test_odd_cells_cost_only_their_exercise(tmp_path):
    nb = student_nb("01", roofline_answers={**RIGHT_01, "add_bytes": 10 ** 5000 if False else 2 ** 4096 * 2 ** 10})
    nb["cells"].append({"cell_type": "code", "source": 12345, "metadata": {}, "outputs": []})
    nb["cells"].append({"source": ["copy_probe_src = ", 7]})
    nb["cells"].append({"cell_type": "code", "source": "copy_probe_src = '" + "(" * 100 + "'\n" + "(" * 200000,
                        "metadata": {}, "outputs": []})
    write_nb(tmp_path / "s" / "a" / "exercises.ipynb", nb)
    rows = B.grade_batch(tmp_path / "s", None, seed=1, runner=fake_runner, progress=False)
    by = {r.exercise: r for r in rows}
    assert by["01.numbers"].points == 7 and "add_bytes" in by["01.numbers"].lost[0]
    assert "01.copy_probe" in by and not any("grader error" in x for r in rows for x in r.lost)


def test_an_unencodable_source_is_a_compile_error_without_a_gpu():
    from labkit.grading import grade
    v = grade("01.copy_probe", 'extern "C" __global__ void copy_probe(const float* x, float* y, long long n)'
                               ' { /* \ud800 */ }')
    assert "compile error:" in v.text and "cannot be encoded as UTF-8" in v.text and "grader error" not in v.text
    v = grade("01.copy_probe", '#include "/dev/zero"\n')
    assert "absolute path" in v.text and v.points == 0


# ---------------------------------------------------------------------------------- 10. no GPU

def test_no_gpu_no_grades(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(B, "visible_devices", lambda: [])
    (tmp_path / "subs").mkdir()
    assert cli.main(["grade", str(tmp_path / "subs"), "--csv", str(tmp_path / "g.csv")]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err and not (tmp_path / "g.csv").exists()


# ------------------------------------------------------------------------------------- 11. scale

def _class(tmp_path, n=12):
    subs = tmp_path / "subs"
    for k in range(n):
        ch = "01" if k % 2 else "02"
        cells = {"roofline_answers": {**RIGHT_01, "add_bytes": k}, "copy_probe_src": "GOOD"} if ch == "01" else \
            {"add_bf16_src": "GOOD", "launch_answers": {"blocks_65537": 257}}
        write_nb(subs / f"student{k:02d}" / "exercises.ipynb", student_nb(ch, **cells))
    write_nb(subs / "zz" / "exercises.solution.ipynb", student_nb("01"))
    (subs / "junk").mkdir()
    (subs / "junk" / "exercises.ipynb").write_text("{not json")
    return subs


def test_two_shards_merged_equal_one_full_run(tmp_path, capsys):
    subs = _class(tmp_path)
    full = tmp_path / "full.csv"
    B.grade_batch(subs, full, seed=5, runner=fake_runner, progress=False)
    parts = []
    for i in range(2):
        p = tmp_path / f"shard{i}.csv"
        B.grade_batch(subs, p, seed=5, runner=fake_runner, progress=False, shard=(i, 2))
        parts.append(p)
    assert all(csv_rows(p) for p in parts), "both shards got work"
    merged = tmp_path / "merged.csv"
    assert cli.main(["grade", "--merge", str(parts[0]), str(parts[1]), "--csv", str(merged)]) == 0
    assert merged.read_bytes() == full.read_bytes()
    other = tmp_path / "other.csv"
    B.grade_batch(subs, other, seed=6, runner=fake_runner, progress=False, shard=(1, 2))
    assert cli.main(["grade", "--merge", str(parts[0]), str(other), "--csv", str(tmp_path / "x.csv")]) == 2
    assert "different seeds" in capsys.readouterr().err
    with pytest.raises(Exception, match="i/N"):
        B.parse_shard("2/2")


def test_every_gpu_gets_a_worker(tmp_path):
    subs = _class(tmp_path, n=8)
    calls.clear()
    one = B.grade_batch(subs, tmp_path / "one.csv", seed=3, runner=fake_runner, progress=False)
    calls.clear()
    four = B.grade_batch(subs, tmp_path / "four.csv", seed=3, runner=fake_runner, progress=False,
                         devices=["0", "1", "2", "3"])
    assert {c["device"] for c in calls} <= {"0", "1", "2", "3"} and len({c["device"] for c in calls}) >= 2
    assert [r.csv() for r in one] == [r.csv() for r in four]
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "four.csv").read_bytes()
