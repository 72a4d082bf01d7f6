"""The course's chapters, one module each (chNN.py), found from the package: adding chapter NN means
adding labkit/chapters/chNN.py (with its kernels, labs and book folders), and nothing else.

A chapter module defines:
- `benchmarks(ctx)`: a generator of Records (measure.records.Record). It first checks each kernel on
  irregular shapes (raising errors.CheckFailed), then times it and its baseline with measure.timing.bench,
  and hands the figures to `ctx.record` (measure.context.Context);
- `HEADLINE`: {op: shape key} the shape each op's plain glue keys and plots refer to in the book (an op
  measured at one shape only may be left out).
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

from ..errors import LabkitError

_NAME = re.compile(r"^ch(\d\d)$")


def numbers() -> list[str]:
    """The numbers of the chapters (such as "05") that have a module here, sorted."""
    return sorted(m[1] for info in pkgutil.iter_modules(__path__) if (m := _NAME.match(info.name)))


def module(chapter: str) -> ModuleType:
    """The module of chapter `chapter` ("05")."""
    if chapter not in numbers():
        raise LabkitError(f"no chapter {chapter!r}: the chapters are {', '.join(numbers())}")
    return importlib.import_module(f"{__name__}.ch{chapter}")


def headline(chapter: str) -> dict:
    """{op: shape key} of a chapter's headline shapes (empty where it declares none)."""
    return dict(getattr(module(chapter), "HEADLINE", {}))
