"""Where things live in the course (one place per concern).

Two ways to have labkit, one set of names:

- a checkout of the course (an editable install, `pip install -e .` as requirements.txt does, or the checkout
  on PYTHONPATH, as the GPU runner has it): every path points into the checkout itself, since the runner
  rewrites files there (recorded notebooks, results, the kernels' result lines);
- an installed package (`pip install .` or `pip install 'labkit @ git+URL'`): the kernels and the recorded
  results ship inside the package as data (labkit/_data/kernels, labkit/_data/results, see pyproject.toml)
  and are found through importlib.resources. The notebooks, the book and the checkout itself are not
  installed: ROOT, LABS and BOOK then raise CheckoutRequired, with what to do, where they are used.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import LabkitError

REPO_URL = "https://github.com/gpu-kernel-engineering/course"
CHECKOUT_HINT = f"run from a checkout: git clone {REPO_URL}, then `pip install -e .` in it or put it on PYTHONPATH"
INSTALL_HINT = f"pip install 'labkit @ git+{REPO_URL}' (or `pip install .` in a checkout), or {CHECKOUT_HINT}"


class CheckoutRequired(LabkitError, FileNotFoundError):
    """A part of the course that only a checkout has (the notebooks, the book) was asked of an installed labkit."""


class _CheckoutOnly:
    """Stands for a folder of the checkout in an installed labkit. Joining it (`LABS / "x"`, as modules do at
    import) and printing it work; using it as a path (opening, listing, globbing, os.fspath) raises
    CheckoutRequired, which says what is missing and how to get it."""

    def __init__(self, rel: str):
        self._rel = rel

    def __truediv__(self, other) -> "_CheckoutOnly":
        return _CheckoutOnly(f"{self._rel}/{other}" if self._rel else str(other))

    def _fail(self):
        raise CheckoutRequired(
            f"{self._rel or 'the root folder'} is part of a checkout of the course, and this labkit is an installed package "
            f"({Path(__file__).resolve().parent}) that ships only the kernels and the recorded results. "
            f"For the notebooks, the book, the GPU runner and the release/grade tools, {CHECKOUT_HINT}.")

    def __fspath__(self):
        self._fail()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._fail()

    def __str__(self) -> str:
        return f"<{self._rel or 'the root folder'} of a course checkout: not in an installed labkit>"

    __repr__ = __str__


_HERE = Path(__file__).resolve().parent
_CHECKOUT = _HERE.parent


def _is_checkout(root: Path) -> bool:
    return (root / "pyproject.toml").is_file() and (root / "kernels").is_dir() and (root / "labs").is_dir()


IN_CHECKOUT = _is_checkout(_CHECKOUT)

if IN_CHECKOUT:
    ROOT = _CHECKOUT
    KERNELS = ROOT / "kernels"      # CUDA sources, one folder per chapter, one file per version
    LABS = ROOT / "labs"            # notebooks, one folder per chapter
    RESULTS = LABS / "results"      # recorded measurements, one JSON file per GPU
    BOOK = ROOT / "book"
else:
    _data = resources.files(__package__) / "_data"
    if not isinstance(_data, Path):   # a zipped install: the compiler and the runner need real files
        raise CheckoutRequired(f"labkit is installed as {_data}, not as files on disk; {INSTALL_HINT}")
    KERNELS = _data / "kernels"
    RESULTS = _data / "results"
    _missing = [f"{what} (no {pattern} under {d})" for what, d, pattern in
                (("kernels", KERNELS, "**/*.cu"), ("recorded results", RESULTS, "*.json"))
                if not (d.is_dir() and any(d.glob(pattern)))]
    if _missing:
        raise CheckoutRequired(f"labkit was installed without its {' and its '.join(_missing)}. {INSTALL_HINT}.")
    ROOT = _CheckoutOnly("")
    LABS = _CheckoutOnly("labs")
    BOOK = _CheckoutOnly("book")


def chapter_dir(base: Path, chapter: str) -> Path:
    """The folder of chapter "03" under base (kernels/, labs/ or book/)."""
    matches = sorted(base.glob(f"{chapter}-*"))
    if not matches:
        raise FileNotFoundError(f"no chapter {chapter} under {base}")
    return matches[0]
