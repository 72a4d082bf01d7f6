"""Release: a solution notebook -> the student view, and a student-only tree of the course.

One source of truth per chapter: labs/NN-slug/exercises.solution.ipynb. Its code cells mark
- solution regions, nbgrader style: a line holding "BEGIN SOLUTION" up to a line holding "END SOLUTION"
  (`### BEGIN SOLUTION` in Python, `// ### BEGIN SOLUTION` inside a CUDA string). Text after the marker
  (`// ### BEGIN SOLUTION: a grid-stride loop`) becomes the stub's TODO line;
- hidden tests: a line holding "BEGIN HIDDEN TESTS" up to one holding "END HIDDEN TESTS".

`release` writes labs/NN-slug/exercises.ipynb: each solution region replaced by a TODO stub with the
marker's indentation, hidden tests removed (a cell left empty by that is dropped), outputs and execution
counts cleared, volatile metadata dropped, notebook metadata otherwise kept (`metadata.labkit.exercises`
names the chapter). `student_tree` writes a copy of the course for a class repository: no solution
notebooks, no tests, and the grading modules' hidden-shape generators replaced by stubs.
"""
from __future__ import annotations

import ast
import copy
import re
import shutil
from pathlib import Path

from .nbio import NotebookFormatError, _text as _joined, notebook_text, read_notebook

SOLUTION_NAME = "exercises.solution.ipynb"
STUDENT_NAME = "exercises.ipynb"

BEGIN_SOLUTION, END_SOLUTION = "BEGIN SOLUTION", "END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"

# cell metadata that changes each time a notebook runs; dropped from the student view
VOLATILE_CELL_KEYS = ("execution", "ExecuteTime", "collapsed", "scrolled")
VOLATILE_NB_KEYS = ("widgets",)


# ------------------------------------------------------------------------------------------ regions

def _regions(text: str, begin: str, end: str, where: str):
    """(start line, end line, marker line) of each region, 0-based inclusive; raise on bad pairing."""
    out, start = [], None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if begin in line:
            if start is not None:
                raise NotebookFormatError(f"{where}: '{begin}' on line {i + 1} inside the region opened on "
                                          f"line {start + 1}")
            start = i
        elif end in line:
            if start is None:
                raise NotebookFormatError(f"{where}: '{end}' on line {i + 1} without a '{begin}' before it")
            out.append((start, i, lines[start]))
            start = None
    if start is not None:
        raise NotebookFormatError(f"{where}: '{begin}' on line {start + 1} is never closed by '{end}'")
    return out


def stub_line(marker: str, cell_type: str = "code") -> str:
    """The TODO line that replaces a solution region opened by `marker` (same indentation)."""
    indent = marker[:len(marker) - len(marker.lstrip())]
    hint = marker.split(BEGIN_SOLUTION, 1)[1]
    hint = re.sub(r"(-->|\*/)\s*$", "", hint).strip(" \t:-\u2014#/")
    hint = hint or ("your code here" if cell_type == "code" else "your answer here")
    s = marker.strip()
    if cell_type != "code":
        return f"{indent}**TODO:** {hint}"
    if s.startswith("//") or s.startswith("/*"):
        return f"{indent}// TODO: {hint}"
    return f"{indent}# TODO: {hint}"


def strip_solutions(text: str, cell_type: str = "code", where: str = "cell") -> str:
    """`text` with every solution region replaced by its TODO stub line."""
    regions = _regions(text, BEGIN_SOLUTION, END_SOLUTION, where)
    if not regions:
        return text
    lines = text.split("\n")
    for start, end, marker in reversed(regions):
        lines[start:end + 1] = [stub_line(marker, cell_type)]
    return "\n".join(lines)


def strip_hidden(text: str, where: str = "cell") -> tuple[str, bool]:
    """(`text` without its hidden-test regions, whether there were any)."""
    regions = _regions(text, BEGIN_HIDDEN, END_HIDDEN, where)
    if not regions:
        return text, False
    lines = text.split("\n")
    for start, end, _ in reversed(regions):
        del lines[start:end + 1]
    return "\n".join(lines), True


def hidden_code(text: str, where: str = "cell") -> list[str]:
    """The code inside each hidden-test region of `text` (dedented to the marker's level)."""
    lines = text.split("\n")
    out = []
    for start, end, marker in _regions(text, BEGIN_HIDDEN, END_HIDDEN, where):
        indent = len(marker) - len(marker.lstrip())
        out.append("\n".join(ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[start + 1:end]))
    return out


# ------------------------------------------------------------------------------------------ release

def release(nb: dict, where: str = "notebook") -> dict:
    """The student view of a solution notebook (a new dict; `nb` is left as it is)."""
    nb = copy.deepcopy(nb)
    cells = []
    for k, cell in enumerate(nb["cells"]):
        w = f"{where}, cell {k}"
        text = _joined(cell.get("source", ""))
        text, had_hidden = strip_hidden(text, w)
        text = strip_solutions(text, cell.get("cell_type", "code"), w)
        if had_hidden:
            text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
            if not text.strip():
                continue
        cell["source"] = text
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        md = cell.get("metadata", {})
        for key in VOLATILE_CELL_KEYS:
            md.pop(key, None)
        cells.append(cell)
    nb["cells"] = cells
    meta = nb.setdefault("metadata", {})
    for key in VOLATILE_NB_KEYS:
        meta.pop(key, None)
    if isinstance(meta.get("language_info"), dict):
        meta["language_info"].pop("version", None)
    lab = meta.setdefault("labkit", {})
    lab = {k: v for k, v in lab.items() if not k.startswith("recorded") and k != "provenance"}  # where the solution ran
    lab["view"] = "student"
    lab["generated_from"] = SOLUTION_NAME
    lab["note"] = ("Generated by `python -m labkit release` from " + SOLUTION_NAME +
                   "; edit that notebook, not this one.")
    meta["labkit"] = lab
    return nb


def release_text(solution_path) -> str:
    """The exact file text of the student notebook generated from `solution_path`."""
    return notebook_text(release(read_notebook(solution_path), where=str(solution_path)))


def solution_notebooks(labs) -> list[Path]:
    return sorted(Path(labs).glob(f"*/{SOLUTION_NAME}"))


def release_all(labs, chapters=None, check: bool = False) -> list[tuple[Path, bool]]:
    """Write (or with check=True only compare) every student notebook; [(student path, was stale)]."""
    out = []
    for src in solution_notebooks(labs):
        chapter = src.parent.name.split("-", 1)[0]
        if chapters and chapter not in chapters:
            continue
        dst = src.parent / STUDENT_NAME
        text = release_text(src)
        stale = not dst.exists() or dst.read_text(encoding="utf-8") != text
        if stale and not check:
            dst.write_text(text, encoding="utf-8")
        out.append((dst, stale))
    return out


# ------------------------------------------------------------------------------------- student tree

# what a class repository leaves out: instructor material, build outputs, local state
TREE_EXCLUDE = {".git", ".venv", "_build", "tests", ".ci", ".pytest_cache", "labkit.egg-info", "__pycache__",
                ".ipynb_checkpoints", ".mypy_cache", ".ruff_cache"}


def strip_hidden_generators(text: str) -> str:
    """A grading module's source with the body of every function passed as `hidden_shapes=` replaced by
    `return []` (the hidden shapes and their edge cases are the instructor's)."""
    tree = ast.parse(text)
    names = {kw.value.id for node in ast.walk(tree) if isinstance(node, ast.Call)
             for kw in node.keywords if kw.arg == "hidden_shapes" and isinstance(kw.value, ast.Name)}
    lines = text.split("\n")
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    for f in sorted(funcs, key=lambda n: n.lineno, reverse=True):
        first = f.body[0]
        indent = " " * first.col_offset
        lines[first.lineno - 1:f.end_lineno] = [f"{indent}return []   # hidden shapes: the instructor's copy only"]
    return "\n".join(lines)


def student_tree(root, dest) -> list[Path]:
    """Copy the course at `root` to `dest` (which must not exist) for students: no exercises.solution.ipynb,
    no tests or CI, no hidden-shape generators. Returns the files written."""
    root, dest = Path(root).resolve(), Path(dest).resolve()
    if dest.exists():
        raise NotebookFormatError(f"{dest} exists: the student tree is written to a new folder")
    if root == dest or root in dest.parents:
        raise NotebookFormatError(f"{dest} is inside the course {root}: write the student tree elsewhere")

    def ignore(folder, names):
        out = {n for n in names if n in TREE_EXCLUDE or n == SOLUTION_NAME or n.endswith(".pyc")}
        if Path(folder).resolve() == root:
            out |= {n for n in names if n.startswith(".") and n not in (".gitignore",)}
        return out
    shutil.copytree(root, dest, ignore=ignore, symlinks=True)
    grading = dest / "labkit" / "grading"
    for mod in sorted(grading.glob("ch[0-9][0-9].py")):
        mod.write_text(strip_hidden_generators(mod.read_text(encoding="utf-8")), encoding="utf-8")
    written = sorted(p for p in dest.rglob("*") if p.is_file())
    leaked = [p for p in written if p.name == SOLUTION_NAME]
    if leaked:
        raise NotebookFormatError(f"solution notebooks left in the student tree: {leaked}")
    return written
