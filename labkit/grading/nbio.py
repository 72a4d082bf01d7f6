"""Notebook files in and out, through nbformat: bounded reads of regular files only, and writes that are
byte for byte what nbformat writes (`notebook_text`).

A notebook is handled as a plain dict (nbformat's NotebookNode is one) whose cells' `source` is one string.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import stat
import warnings
from pathlib import Path

MAX_NOTEBOOK_BYTES = 32 << 20       # a submitted notebook larger than this is refused, unread


class NotebookFormatError(ValueError):
    """A file that is not a (readable, bounded, regular) notebook, or a solution whose markers do not pair."""


def read_bounded(path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of `path`, a regular file (not a link, FIFO or device) of at most `limit` bytes."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError as e:
        raise NotebookFormatError(f"{path}: cannot be read ({type(e).__name__}: {e.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise NotebookFormatError(f"{path}: a symbolic link, not a notebook file")
    if not stat.S_ISREG(st.st_mode):
        raise NotebookFormatError(f"{path}: not a regular file")
    if st.st_size > limit:
        raise NotebookFormatError(f"{path}: {st.st_size} bytes, more than the {limit} a notebook may have")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise NotebookFormatError(f"{path}: cannot be opened ({e.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotebookFormatError(f"{path}: not a regular file")
        chunks, total = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > limit:
                raise NotebookFormatError(f"{path}: more than the {limit} bytes a notebook may have")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _text(source) -> str:
    if isinstance(source, str):
        return source
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return ""


def _clean_cell(cell: dict) -> dict:
    cell["source"] = _text(cell.get("source", ""))
    if not isinstance(cell.get("cell_type"), str):
        cell["cell_type"] = "raw"
    if not isinstance(cell.get("metadata"), dict):
        cell["metadata"] = {}
    return cell


def parse_notebook(data: bytes | str, where: str = "notebook") -> dict:
    """A notebook from its file contents (nbformat, upgraded to v4), every cell's `source` one string."""
    import nbformat
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise NotebookFormatError(f"{where}: not a readable notebook (not UTF-8: {e.reason} at byte {e.start})") from None
    log = logging.getLogger("nbformat")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = json.loads(text)
            if isinstance(raw, dict) and isinstance(raw.get("cells"), list):
                # an odd cell (a source that is a number, a cell that is not an object) must cost only the
                # exercise it concerns: the cells are made readable before nbformat sees them
                raw["cells"] = [_clean_cell(c) for c in raw["cells"] if isinstance(c, dict)]
                if not isinstance(raw.get("metadata"), dict):
                    raw["metadata"] = {}
                raw.setdefault("nbformat", 4)
                raw.setdefault("nbformat_minor", 5)
                nb = nbformat.from_dict(raw)
                if nb.get("nbformat") != 4:
                    nb = nbformat.convert(nb, 4)
            else:
                nb = nbformat.reads(text, as_version=4)
    except Exception as e:  # noqa: BLE001 - JSON errors, nbformat errors, nesting too deep: all "not a notebook"
        raise NotebookFormatError(f"{where}: not a readable notebook ({type(e).__name__}: "
                                  f"{str(e)[:200]})") from None
    finally:
        log.setLevel(level)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookFormatError(f"{where}: not a notebook (no list of cells)")
    cells = []
    for cell in nb["cells"]:
        if not isinstance(cell, dict):
            continue
        cell["source"] = _text(cell.get("source", ""))
        if not isinstance(cell.get("cell_type"), str):
            cell["cell_type"] = "raw"
        cells.append(cell)
    nb["cells"] = cells
    if not isinstance(nb.get("metadata"), dict):
        nb["metadata"] = {}
    return nb


def read_notebook(path, limit: int = MAX_NOTEBOOK_BYTES) -> dict:
    """The notebook at `path` (a bounded read of a regular file; see parse_notebook)."""
    return parse_notebook(read_bounded(path, limit), str(path))


def notebook_text(nb: dict) -> str:
    """The file text nbformat writes for `nb` (sorted keys, indent 1, lines split, final newline)."""
    import nbformat
    node = nbformat.from_dict(copy.deepcopy(dict(nb)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = nbformat.writes(node)
    return text if text.endswith("\n") else text + "\n"


def write_notebook(nb: dict, path) -> None:
    Path(path).write_text(notebook_text(nb), encoding="utf-8")
