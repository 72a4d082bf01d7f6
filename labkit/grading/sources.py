"""A learner's CUDA source checked before NVRTC sees it: encodable, bounded, and `#include` limited to the
course's headers and the CUDA headers (an absolute path, `..`, /dev/*, /proc/* or a macro is refused: an
`#include "/dev/zero"` would stall NVRTC). Plain text processing: importable and testable without a GPU."""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from ..measure.compile import include_dirs
from ..paths import KERNELS

MAX_SOURCE_CHARS = 1 << 20          # 1 Mi characters: far beyond any exercise
# headers NVRTC provides itself (no file behind them)
BUILTIN_HEADERS = {"cstdint", "stdint.h", "cuda_runtime.h", "cstddef", "stddef.h", "climits", "limits.h",
                   "type_traits", "cfloat", "float.h", "cmath", "math.h", "cuda/std/cstdint", "cuda/std/limits",
                   "cuda/std/type_traits", "cuda/std/cmath", "cuda/std/utility"}

_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?(?:\*/|\Z)', re.DOTALL)
_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*(include_next|include|import|embed)\b(.*)$", re.MULTILINE)
_OPERAND = re.compile(r'^[ \t]*(?:<([^<>\n]*)>|"([^"\n]*)")[ \t]*$')
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./+-]*$")


def _strip_comments(text: str) -> str:
    def repl(m):
        s = m.group(0)
        if s.startswith("//"):
            return " "
        if s.startswith("/*"):
            return " " + "\n" * s.count("\n")
        return s
    return _TOKENS.sub(repl, text)


def allowed_dirs() -> list[Path]:
    return [Path(KERNELS).resolve()] + [Path(d).resolve() for d in include_dirs()]


def include_problem(name: str, dirs=None) -> str | None:
    """Why `#include` of `name` is refused, or None when it names a course or CUDA header."""
    shown = ascii(name)
    if not name:
        return "an empty #include"
    if name.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", name):
        return f"#include {shown}: an absolute path; only the course's and CUDA's headers can be included"
    parts = re.split(r"[\\/]", name)
    if ".." in parts:
        return f"#include {shown}: '..' is not allowed; only the course's and CUDA's headers can be included"
    if not _SAFE_NAME.match(name):
        return f"#include {shown}: unusual characters in the header name"
    if name in BUILTIN_HEADERS:
        return None
    for d in (allowed_dirs() if dirs is None else dirs):
        p = Path(d) / name
        try:
            real = p.resolve()
        except (OSError, RuntimeError):
            continue
        if real.is_file() and (real == d or d in real.parents):
            return None
    return (f"#include {shown}: not a header of the course (kernels/) or of CUDA; the grader compiles with "
            "those only")


def source_problem(source, dirs=None) -> str | None:
    """What makes `source` uncompilable for reasons of its own text (the learner's problem), or None."""
    if not isinstance(source, str):
        return f"the source must be a string of CUDA C++, got {type(source).__name__}"
    if len(source) > MAX_SOURCE_CHARS:
        return f"the source has {len(source)} characters; the grader's limit is {MAX_SOURCE_CHARS}"
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as e:
        line = source.count("\n", 0, e.start) + 1
        return (f"line {line}: the character U+{ord(source[e.start]):04X} cannot be encoded as UTF-8 (a lone "
                "surrogate?); the compiler reads UTF-8")
    if "\x00" in source:
        return f"line {source.count(chr(10), 0, source.index(chr(0))) + 1}: a NUL character in the source"
    text = re.sub(r"\\[ \t]*\r?\n", "", source)          # line splices first, as the preprocessor does
    text = _strip_comments(text)
    for m in _DIRECTIVE.finditer(text):
        kind, rest = m.group(1), m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if kind != "include":
            return f"line {line}: #{kind} is not allowed; use #include of the course's or CUDA's headers"
        op = _OPERAND.match(rest)
        if not op:
            return (f"line {line}: #include must name a header as <name> or \"name\" (a macro or any other "
                    "form is not allowed)")
        why = include_problem(op.group(1) if op.group(1) is not None else op.group(2), dirs)
        if why:
            return f"line {line}: {why}"
    return None


def safe_cwd() -> str:
    """Change to a new empty folder to compile in (a quoted #include is looked up next to the source, i.e.
    here); returns it (the caller removes it)."""
    d = tempfile.mkdtemp(prefix="labkit-grade-")
    os.chdir(d)
    return d
