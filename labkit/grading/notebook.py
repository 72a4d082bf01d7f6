"""Exercise notebooks as files: solution regions, release to the student view, and static reading.

One source of truth per chapter: labs/NN-slug/exercises.solution.ipynb. Its code cells mark
- solution regions, nbgrader style: a line holding "BEGIN SOLUTION" up to a line holding "END SOLUTION"
  (`### BEGIN SOLUTION` in Python, `// ### BEGIN SOLUTION` inside a CUDA string). Text after the marker
  (`// ### BEGIN SOLUTION: a grid-stride loop`) becomes the stub's TODO line;
- hidden tests: a line holding "BEGIN HIDDEN TESTS" up to one holding "END HIDDEN TESTS".

`release` writes labs/NN-slug/exercises.ipynb: each solution region replaced by a TODO stub with the
marker's indentation, hidden tests removed (a cell left empty by that is dropped), outputs and execution
counts cleared, volatile metadata dropped, notebook metadata otherwise kept (`metadata.labkit.exercises`
names the chapter; the instructor's grader reads it).

Everything here reads notebooks as JSON (no nbformat needed, so it also runs on a bare GPU runner) and
writes them byte for byte as nbformat does (sorted keys, indent 1, multi-line strings split into lists).

Submissions are read statically: `ast` over the code cells, never executed in the grader's process.
"""
from __future__ import annotations

import ast
import copy
import json
import operator
import re
from pathlib import Path

SOLUTION_NAME = "exercises.solution.ipynb"
STUDENT_NAME = "exercises.ipynb"

BEGIN_SOLUTION, END_SOLUTION = "BEGIN SOLUTION", "END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"

# cell metadata that changes each time a notebook runs; dropped from the student view
VOLATILE_CELL_KEYS = ("execution", "ExecuteTime", "collapsed", "scrolled")
VOLATILE_NB_KEYS = ("widgets",)


class NotebookFormatError(ValueError):
    """A solution notebook whose markers do not pair up, or a file that is not a notebook."""


# ------------------------------------------------------------------------------------------ file I/O

def read_notebook(path) -> dict:
    """A notebook as a dict, every `source` joined into one string."""
    path = Path(path)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NotebookFormatError(f"{path}: not a readable notebook ({type(e).__name__}: {e})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookFormatError(f"{path}: not a notebook (no list of cells)")
    for cell in nb["cells"]:
        cell["source"] = _joined(cell.get("source", ""))
    return nb


def _joined(text) -> str:
    return "".join(text) if isinstance(text, list) else (text or "")


def _split_bundle(bundle: dict):
    for k, v in bundle.items():
        if isinstance(v, str) and (k.startswith("text/") or k in ("application/javascript", "image/svg+xml")):
            bundle[k] = v.splitlines(True)


def notebook_text(nb: dict) -> str:
    """The file text nbformat would write for `nb` (sorted keys, indent 1, lines split, final newline)."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if isinstance(cell.get("source"), str):
            cell["source"] = cell["source"].splitlines(True)
        for output in cell.get("outputs", []):
            if output.get("output_type") in ("execute_result", "display_data"):
                _split_bundle(output.get("data", {}))
            elif output.get("output_type") == "stream" and isinstance(output.get("text"), str):
                output["text"] = output["text"].splitlines(True)
    return json.dumps(nb, sort_keys=True, indent=1, separators=(",", ": "), ensure_ascii=False) + "\n"


def write_notebook(nb: dict, path) -> None:
    Path(path).write_text(notebook_text(nb), encoding="utf-8")


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


def chapter_of(nb: dict) -> str | None:
    """The chapter ("03") a notebook's exercises belong to, from metadata.labkit.exercises."""
    lab = nb.get("metadata", {}).get("labkit", {})
    ch = lab.get("exercises") if isinstance(lab, dict) else None
    return str(ch) if ch is not None else None


# ------------------------------------------------------------------------------------- static reading

class NotStatic(ValueError):
    """A value the grader cannot read without running code (a name, a call, ...)."""


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def safe_eval(node):
    """Evaluate literals and arithmetic on number literals (`2**31 + 3`, `3 * 2 * 2**28`), nothing else."""
    if isinstance(node, ast.Expression):
        node = node.body
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        vals = [safe_eval(e) for e in node.elts]
        return tuple(vals) if isinstance(node, ast.Tuple) else vals
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise NotStatic("a ** expansion inside a dict")
        return {safe_eval(k): safe_eval(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = safe_eval(node.operand)
        if not _num(v):
            raise NotStatic("a sign in front of something that is not a number")
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = safe_eval(node.left), safe_eval(node.right)
        if isinstance(node.op, ast.Add) and isinstance(a, str) and isinstance(b, str):
            return a + b
        if not (_num(a) and _num(b)):
            raise NotStatic("arithmetic on something that is not a number")
        if isinstance(node.op, ast.Pow) and (abs(b) > 256 or abs(a) > 2 ** 64):
            raise NotStatic("a power too large to evaluate")
        if isinstance(node.op, (ast.LShift, ast.RShift)) and not (isinstance(b, int) and 0 <= b <= 256):
            raise NotStatic("a shift out of range")
        try:
            return _BINOPS[type(node.op)](a, b)
        except (ArithmeticError, ValueError) as e:
            raise NotStatic(str(e)) from None
    raise NotStatic(f"{type(node).__name__} is not a literal")


def _strip_magics(text: str) -> str:
    """IPython magics and shell escapes blanked (line numbers kept) so `ast` can parse the cell."""
    out = []
    for line in text.split("\n"):
        s = line.lstrip()
        out.append("" if s.startswith(("%", "!")) else line)
    return "\n".join(out)


def parse_cell(text: str):
    """ast.Module of a code cell, or None if it is not Python (even with magics blanked)."""
    try:
        return ast.parse(_strip_magics(text))
    except (SyntaxError, ValueError):
        return None


def code_cells(nb: dict) -> list[str]:
    return [_joined(c.get("source", "")) for c in nb["cells"] if c.get("cell_type") == "code"]


def _assignments(nb: dict, name: str):
    """Value nodes assigned to `name` at the top level of the code cells, in notebook order."""
    for text in code_cells(nb):
        tree = parse_cell(text)
        if tree is None:
            continue
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign):
                for tgt in stmt.targets:
                    if isinstance(tgt, ast.Name) and tgt.id == name:
                        yield stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                    and stmt.target.id == name and stmt.value is not None:
                yield stmt.value


class Missing(LookupError):
    """What the grader looked for in a submission is not there (or not a literal); str() says which."""


def extract_source(nb: dict, var: str) -> str:
    """The last string literal assigned to `var` in the notebook's code cells."""
    values = list(_assignments(nb, var))
    if not values:
        raise Missing(f"no assignment to {var} found in the notebook")
    try:
        v = safe_eval(values[-1])
    except NotStatic as e:
        raise Missing(f"the last assignment to {var} is not a string literal ({e}); "
                      f"the grader reads {var} without running the notebook") from None
    if not isinstance(v, str):
        raise Missing(f"the last assignment to {var} is a {type(v).__name__}, not a string of CUDA source")
    return v


def _calls(tree, func: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name == func:
                yield node


def extract_answers(nb: dict, task_id: str, var: str | None) -> dict:
    """The answers dict of a numeric task: the last dict literal assigned to `var`, else the last dict
    literal passed straight to check_answers(task_id, {...})."""
    values = list(_assignments(nb, var)) if var else []
    node = values[-1] if values else None
    if node is None:
        for text in code_cells(nb):
            tree = parse_cell(text)
            for call in _calls(tree, "check_answers") if tree else ():
                if len(call.args) >= 2 and isinstance(call.args[0], ast.Constant) \
                        and call.args[0].value == task_id and isinstance(call.args[1], ast.Dict):
                    node = call.args[1]
    if node is None:
        raise Missing(f"no answers for {task_id} found" + (f" (no assignment to {var})" if var else ""))
    if not isinstance(node, ast.Dict):
        raise Missing(f"the answers for {task_id} are not a dict literal")
    out = {}
    for k, v in zip(node.keys, node.values):
        try:
            key = safe_eval(k)
        except NotStatic:
            continue
        try:
            out[key] = safe_eval(v)
        except NotStatic as e:
            out[key] = NotStatic(f"not a number the grader can read without running code ({e})")
    return out


def hidden_shapes(nb: dict) -> dict[str, list]:
    """{task id: shapes} from the grade(...) calls inside the solution notebook's hidden-test regions."""
    out: dict[str, list] = {}
    for k, text in enumerate(code_cells(nb)):
        for code in hidden_code(text, f"code cell {k}"):
            tree = parse_cell(code)
            if tree is None:
                raise NotebookFormatError(f"code cell {k}: the hidden tests are not valid Python")
            for call in _calls(tree, "grade"):
                if not call.args or not isinstance(call.args[0], ast.Constant):
                    continue
                for kw in call.keywords:
                    if kw.arg == "shapes":
                        shapes = safe_eval(kw.value)
                        out.setdefault(call.args[0].value, []).extend(
                            tuple(s) if isinstance(s, list) else s for s in shapes)
    return out


def graded_tasks(nb: dict) -> list[str]:
    """Task ids the notebook grades (grade / check_answers calls), in order, each once."""
    seen: dict[str, None] = {}
    for text in code_cells(nb):
        tree = parse_cell(text)
        if tree is None:
            continue
        for fn in ("grade", "check_answers"):
            for call in _calls(tree, fn):
                if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
                    seen.setdefault(call.args[0].value, None)
    return list(seen)
