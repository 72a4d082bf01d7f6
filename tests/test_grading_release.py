"""Release: solution regions become TODO stubs, hidden tests go, outputs are cleared, metadata stays;
and the committed student notebooks are exactly what release makes of their sources."""
from __future__ import annotations

import copy

import pytest

from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.paths import LABS

SOLUTIONS = N.solution_notebooks(LABS)


def _nb(cells, **meta):
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {"labkit": {"exercises": "09"}, **meta},
            "cells": cells}


def _code(src, outputs=None, count=3, **md):
    return {"cell_type": "code", "id": f"c{abs(hash(src)) % 10**8}", "source": src, "metadata": md,
            "outputs": outputs or [], "execution_count": count}


CUDA_CELL = '''k_src = r"""
__global__ void k(float* y)
{
    int i = threadIdx.x;
    // ### BEGIN SOLUTION: write one element per thread
    y[i] = 1.0f;
    y[i] += 0.0f;
    // ### END SOLUTION
}
"""'''

PY_CELL = '''answers = {"a": None}
### BEGIN SOLUTION
answers = {"a": 2 * 3}
### END SOLUTION
check_answers("09.numbers", answers)'''

HIDDEN_ONLY = '''### BEGIN HIDDEN TESTS
grade("09.k", k_src, shapes=[2**31 + 1], hidden=True)
### END HIDDEN TESTS'''

MIXED = '''grade("09.k", k_src)

### BEGIN HIDDEN TESTS
grade("09.k", k_src, shapes=[(3, 5)], hidden=True)
### END HIDDEN TESTS
print("after")'''


def test_solution_regions_become_stubs_with_the_markers_indentation():
    out = N.strip_solutions(CUDA_CELL)
    assert "y[i] = 1.0f" not in out and "BEGIN SOLUTION" not in out and "END SOLUTION" not in out
    assert "    // TODO: write one element per thread\n}" in out
    assert "int i = threadIdx.x;" in out                       # outside the region: kept
    py = N.strip_solutions(PY_CELL)
    assert py == 'answers = {"a": None}\n# TODO: your code here\ncheck_answers("09.numbers", answers)'


def test_hidden_tests_removed_and_hidden_only_cells_dropped():
    out, had = N.strip_hidden(MIXED)
    assert had and "hidden=True" not in out and 'grade("09.k", k_src)' in out and 'print("after")' in out
    nb = _nb([_code(CUDA_CELL), _code(HIDDEN_ONLY), _code(MIXED)])
    rel = N.release(nb)
    assert len(rel["cells"]) == 2
    assert all("HIDDEN" not in c["source"] for c in rel["cells"])


def test_outputs_and_counts_cleared_metadata_kept():
    outputs = [{"output_type": "stream", "name": "stdout", "text": "points: 5/5\n"}]
    cell = _code(PY_CELL, outputs=outputs, count=7, tags=["graded"], execution={"iopub.status.busy": "x"},
                 ExecuteTime={"end_time": "x"})
    nb = _nb([cell, {"cell_type": "markdown", "id": "m1", "metadata": {"tags": ["intro"]}, "source": "# Title"}],
             kernelspec={"name": "python3", "display_name": "Python 3", "language": "python"},
             language_info={"name": "python", "version": "3.12.3"}, widgets={"state": {}},
             mystnb={"execution_mode": "off"})
    before = copy.deepcopy(nb)
    rel = N.release(nb)
    assert nb == before                                       # the source is left as it is
    code, md = rel["cells"]
    assert code["outputs"] == [] and code["execution_count"] is None
    assert code["metadata"] == {"tags": ["graded"]}           # volatile keys gone, tags kept
    assert code["id"] == cell["id"] and md == nb["cells"][1]
    meta = rel["metadata"]
    assert meta["kernelspec"] == nb["metadata"]["kernelspec"] and meta["mystnb"] == {"execution_mode": "off"}
    assert meta["labkit"]["exercises"] == "09" and meta["labkit"]["view"] == "student"
    assert "widgets" not in meta and meta["language_info"] == {"name": "python"}


@pytest.mark.parametrize("text, msg", [
    ("// ### BEGIN SOLUTION\nx\n", "never closed"),
    ("x\n// ### END SOLUTION\n", "without a"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside the region"),
])
def test_unpaired_markers_are_errors(text, msg):
    with pytest.raises(N.NotebookFormatError, match=msg):
        N.release(_nb([_code(text)]), where="x.ipynb")


def test_notebook_text_matches_nbformat():
    import nbformat                       # a hard dependency: the grader reads notebooks through it
    for path in SOLUTIONS:
        nb = nbformat.read(path, as_version=4)
        assert N.notebook_text(N.read_notebook(path)) == nbformat.writes(nb) + ("" if nbformat.writes(nb).endswith("\n") else "\n")


# ----------------------------------------------------------------------------- the course's notebooks

def test_every_chapter_with_exercises_has_a_solution_source():
    chapters = {t.chapter for t in T.all_tasks().values()}
    have = {p.parent.name.split("-")[0] for p in SOLUTIONS}
    assert chapters <= have, f"no exercises.solution.ipynb for chapter(s) {sorted(chapters - have)}"


@pytest.mark.parametrize("src", SOLUTIONS, ids=lambda p: p.parent.name)
def test_committed_student_notebook_is_in_step_with_its_source(src):
    student = src.parent / N.STUDENT_NAME
    assert student.exists(), f"{student} is missing: run `python -m labkit release`"
    assert student.read_text(encoding="utf-8") == N.release_text(src), (
        f"{student.relative_to(LABS.parent)} is out of step with {src.name}: "
        "run `python -m labkit release` and commit the result")


@pytest.mark.parametrize("src", SOLUTIONS, ids=lambda p: p.parent.name)
def test_solution_notebook_structure(src):
    nb = N.read_notebook(src)
    chapter = src.parent.name.split("-")[0]
    assert N.chapter_of(nb) == chapter
    tasks = T.for_chapter(chapter)
    graded = N.graded_tasks(nb)
    assert set(graded) == {t.id for t in tasks}, "every exercise of the chapter is graded in its notebook"
    hidden = N.hidden_shapes(nb)
    student = N.read_notebook(src.parent / N.STUDENT_NAME)
    for t in tasks:
        if isinstance(t, T.KernelTask):
            assert hidden.get(t.id), f"{t.id} has no hidden tests in {src.name}"
            sol = N.extract_source(nb, t.source_var)
            stub = N.extract_source(student, t.source_var)
            assert t.kernel in sol and t.kernel in stub and "TODO" in stub and "TODO" not in sol
        else:
            answers = N.extract_answers(nb, t.id, t.answers_var)
            assert set(answers) == {q.key for q in t.questions}
            assert all(v is None for v in N.extract_answers(student, t.id, t.answers_var).values())
    text = "".join(c["source"] for c in student["cells"])
    for word in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "hidden=True"):
        assert word not in text


def test_every_notebook_opens_with_its_title_then_the_one_setup_idiom():
    """The title first (the setup cell used to come before it), then the course's one setup cell, the
    same text in every lab and exercise notebook: a checkout's labkit, else `pip install` of the course."""
    notebooks = sorted(LABS.glob("*/*.ipynb"))
    setups = set()
    for path in notebooks:
        cells = N.read_notebook(path)["cells"]
        assert cells[0]["cell_type"] == "markdown" and cells[0]["source"].startswith("# "), path
        first_code = next(c for c in cells if c["cell_type"] == "code")["source"]
        setups.add(first_code)
    assert len(setups) == 1, f"{len(setups)} different setup cells among {len(notebooks)} notebooks"
    setup = setups.pop()
    assert "except ImportError" in setup and "%pip install" in setup
    assert "git+https://github.com/gpu-kernel-engineering/course" in setup


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_solutions_and_starters_compile(arch):
    """Every reference solution and every student starter compiles (NVRTC, no GPU needed), without spills."""
    from labkit.measure.compile import compile_check
    for src in SOLUTIONS:
        nb, student = N.read_notebook(src), N.read_notebook(src.parent / N.STUDENT_NAME)
        for t in T.for_chapter(src.parent.name.split("-")[0]):
            if isinstance(t, T.KernelTask):
                a = t.arch or arch          # a task that fixes its target (sm_90a) is compiled for that
                rep = compile_check(N.extract_source(nb, t.source_var), a)
                assert rep.functions[t.kernel].spills == 0, str(rep)
                assert t.kernel in compile_check(N.extract_source(student, t.source_var), a).functions
