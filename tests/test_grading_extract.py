"""Static reading of submissions: sources, answers and hidden shapes, without running a notebook."""
from __future__ import annotations

import ast

import pytest

from labkit.grading import notebook as N
from labkit.grading import tasks as T
from labkit.paths import LABS


def nb_of(*sources):
    return {"cells": [{"cell_type": "code", "source": s, "metadata": {}, "outputs": []} for s in sources],
            "metadata": {}}


def test_last_string_literal_assignment_wins():
    nb = nb_of('k_src = r"""first"""', "%%time\n!nvidia-smi\nk_src = 'second'\nx = 1",
               "print(k_src)", "def f():\n    k_src = 'inside a function: ignored'\n")
    assert N.extract_source(nb, "k_src") == "second"


def test_markdown_and_non_python_cells_are_skipped():
    nb = nb_of('k_src = "a"', "this is not python (", "%%bash\necho hi")
    nb["cells"].append({"cell_type": "markdown", "source": 'k_src = "from markdown"', "metadata": {}})
    assert N.extract_source(nb, "k_src") == "a"


def test_string_concatenation_is_static():
    assert N.extract_source(nb_of('k_src = "a" "b" + "c"'), "k_src") == "abc"


@pytest.mark.parametrize("cell, msg", [
    ("x = 1", "no assignment to k_src"),
    ("k_src = open('k.cu').read()", "not a string literal"),
    ("k_src = 42", "is a int"),
    ("k_src = f'{1}'", "not a string literal"),
])
def test_missing_or_dynamic_source(cell, msg):
    with pytest.raises(N.Missing, match=msg):
        N.extract_source(nb_of(cell), "k_src")


def test_answers_from_the_variable_with_arithmetic():
    nb = nb_of('ans = {"a": None}', 'ans = {"a": 3 * 2 * 2**28, "b": 1 / 6, "c": -1e3, "d": n * 2, "e": ...}\n'
               'check_answers("09.numbers", ans)')
    got = N.extract_answers(nb, "09.numbers", "ans")
    assert got["a"] == 3 * 2 * 2 ** 28 and got["b"] == 1 / 6 and got["c"] == -1000.0 and got["e"] is Ellipsis
    assert isinstance(got["d"], N.NotStatic)


def test_answers_passed_inline():
    nb = nb_of('check_answers("09.numbers", {"a": 4})', 'check_answers("09.other", {"a": 5})')
    assert N.extract_answers(nb, "09.numbers", "ans") == {"a": 4}
    with pytest.raises(N.Missing):
        N.extract_answers(nb_of("x = 1"), "09.numbers", "ans")


@pytest.mark.parametrize("expr", ["2**10**10", "__import__('os')", "[x for x in y]", "a.b", "1 << 100000",
                                  "'a' * 10**9", "{**d}"])
def test_safe_eval_refuses_code(expr):
    with pytest.raises(N.NotStatic):
        N.safe_eval(ast.parse(expr, mode="eval"))


def test_safe_eval_accepts_shapes():
    v = N.safe_eval(ast.parse("[0, 2**31 + 3, (17, 4095), (1 << 20) - 1, 1_000_003]", mode="eval"))
    assert v == [0, 2 ** 31 + 3, (17, 4095), (1 << 20) - 1, 1_000_003]


def test_hidden_shapes_read_from_hidden_regions_only():
    nb = nb_of('grade("09.k", k_src, shapes=[1, 2])',
               '### BEGIN HIDDEN TESTS\ngrade("09.k", k_src, shapes=[2**31 + 3, (3, 5)], hidden=True)\n'
               'grade("09.j", j_src, shapes=[[7, 8]], hidden=True)\n### END HIDDEN TESTS')
    assert N.hidden_shapes(nb) == {"09.k": [2 ** 31 + 3, (3, 5)], "09.j": [(7, 8)]}


def test_hidden_shapes_of_the_course():
    """The shapes the instructor's grader adds, as read from the solution notebooks."""
    found = {}
    for src in N.solution_notebooks(LABS):
        found.update(N.hidden_shapes(N.read_notebook(src)))
    assert 2 ** 31 + 3 in found["02.add_any_n"]                   # the 32-bit index overflow test
    assert any(isinstance(s, int) and s > 2 ** 31 for s in found["03.vec_add"])
    assert any(r * c > 2 ** 31 for r, c in found["04.rmsnorm"])   # row * cols in int overflows
    for tid, shapes in found.items():
        task = T.get(tid)
        for s in shapes:                                          # each is a shape the task can run
            assert isinstance(T.norm_shape(s), type(T.norm_shape(task.shapes[0])))
