"""Static reading of a submission: its chapter, each exercise's CUDA source and numeric answers, and the
grade(...) calls of a notebook. Nothing is executed: `ast` over the code cells, and `safe_eval` for
literals and arithmetic on number literals, every operation bounded (integer size, string length, work),
so `10**10**10`, `1 << 10**9` or a deeply nested expression is refused, not computed.
"""
from __future__ import annotations

import ast
import operator
import re

from .nbio import NotebookFormatError
from .release import hidden_code

MAX_CELL_CHARS = 2 << 20          # a code cell longer than this is not parsed
MAX_INT_BITS = 4096               # no integer larger than 2**4096 is built
MAX_STR_CHARS = 1 << 20           # no string longer than this is built
MAX_NODES = 100_000               # literal nodes evaluated per value

_CHAPTER = re.compile(r"^\d\d$")


class NotStatic(ValueError):
    """A value the grader cannot read without running code (a name, a call, ...), or one too large."""


class Missing(LookupError):
    """What the grader looked for in a submission is not there (or not a literal); str() says which."""


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bits(v) -> int:
    return abs(v).bit_length() if isinstance(v, int) else 0


def _check_size(v):
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > MAX_INT_BITS:
        raise NotStatic(f"a number with more than {MAX_INT_BITS} bits")
    if isinstance(v, (str, bytes)) and len(v) > MAX_STR_CHARS:
        raise NotStatic(f"a string longer than {MAX_STR_CHARS} characters")
    return v


def _binop(op, a, b):
    if isinstance(op, ast.Add) and isinstance(a, str) and isinstance(b, str):
        if len(a) + len(b) > MAX_STR_CHARS:
            raise NotStatic(f"a string longer than {MAX_STR_CHARS} characters")
        return a + b
    if not (_num(a) and _num(b)):
        raise NotStatic("arithmetic on something that is not a number")
    ints = isinstance(a, int) and isinstance(b, int)
    if isinstance(op, ast.Pow):
        if ints and b >= 0 and b * max(1, _bits(a)) > MAX_INT_BITS and abs(a) > 1:
            raise NotStatic("a power too large to evaluate")
        if abs(b) > 1e6 and not ints:
            raise NotStatic("a power too large to evaluate")
    if isinstance(op, ast.Mult) and ints and _bits(a) + _bits(b) > MAX_INT_BITS:
        raise NotStatic("a product too large to evaluate")
    if isinstance(op, (ast.LShift, ast.RShift)):
        if not (ints and 0 <= b <= MAX_INT_BITS):
            raise NotStatic("a shift out of range")
        if isinstance(op, ast.LShift) and _bits(a) + b > MAX_INT_BITS:
            raise NotStatic("a shift too large to evaluate")
    try:
        v = _BINOPS[type(op)](a, b)
    except (ArithmeticError, ValueError, TypeError) as e:
        raise NotStatic(str(e)) from None
    if isinstance(v, complex):
        raise NotStatic("a complex number")
    return _check_size(v)


def safe_eval(node, _budget=None):
    """Evaluate literals and arithmetic on number literals (`2**31 + 3`, `3 * 2 * 2**28`), nothing else;
    NotStatic for anything else, and for anything too large or too much work."""
    budget = _budget if _budget is not None else [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        raise NotStatic("an expression too large to evaluate")
    try:
        if isinstance(node, ast.Expression):
            node = node.body
        if isinstance(node, ast.Constant):
            return _check_size(node.value)
        if isinstance(node, (ast.Tuple, ast.List)):
            vals = [safe_eval(e, budget) for e in node.elts]
            return tuple(vals) if isinstance(node, ast.Tuple) else vals
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise NotStatic("a ** expansion inside a dict")
            out = {}
            for k, v in zip(node.keys, node.values):
                key = safe_eval(k, budget)
                try:
                    hash(key)
                except TypeError:
                    raise NotStatic("a dict key that is not a string or number") from None
                out[key] = safe_eval(v, budget)
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = safe_eval(node.operand, budget)
            if not _num(v):
                raise NotStatic("a sign in front of something that is not a number")
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _binop(node.op, safe_eval(node.left, budget), safe_eval(node.right, budget))
    except (RecursionError, MemoryError):
        raise NotStatic("an expression nested too deeply to evaluate") from None
    raise NotStatic(f"{type(node).__name__} is not a literal")


def _strip_magics(text: str) -> str:
    """IPython magics and shell escapes blanked (line numbers kept) so `ast` can parse the cell."""
    out = []
    for line in text.split("\n"):
        s = line.lstrip()
        out.append("" if s.startswith(("%", "!")) else line)
    return "\n".join(out)


def parse_cell(text: str):
    """ast.Module of a code cell, or None if it is not Python (even with magics blanked), or too large."""
    if not isinstance(text, str) or len(text) > MAX_CELL_CHARS:
        return None
    try:
        return ast.parse(_strip_magics(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def code_cells(nb: dict) -> list[str]:
    return [c.get("source", "") if isinstance(c.get("source", ""), str) else ""
            for c in nb.get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "code"]


def chapter_of(nb: dict) -> str | None:
    """The chapter ("03") a notebook's metadata.labkit.exercises names, as written (None when absent)."""
    meta = nb.get("metadata")
    lab = meta.get("labkit") if isinstance(meta, dict) else None
    ch = lab.get("exercises") if isinstance(lab, dict) else None
    if ch is None:
        return None
    ch = str(ch) if isinstance(ch, (str, int)) and not isinstance(ch, bool) else repr(type(ch).__name__)
    return ch[:40]


def is_chapter(ch) -> bool:
    return isinstance(ch, str) and bool(_CHAPTER.match(ch))


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
    literal passed straight to check_answers(task_id, {...}). Keys that are not strings are dropped; a
    value that cannot be read statically becomes a NotStatic (its question gets no point)."""
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
        if k is None:
            continue
        try:
            key = safe_eval(k)
        except NotStatic:
            continue
        if not isinstance(key, str):
            continue
        try:
            out[key] = safe_eval(v)
        except NotStatic as e:
            out[key] = NotStatic(f"not a number the grader can read without running code ({e})")
    return out


def hidden_shapes(nb: dict) -> dict[str, list]:
    """{task id: shapes} from the grade(...) calls inside a notebook's hidden-test regions (the solution
    notebooks' own self-checks; the batch grader draws its hidden shapes from the tasks instead)."""
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
