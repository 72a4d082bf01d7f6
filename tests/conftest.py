"""Shared fixtures. GPU tests carry @pytest.mark.gpu and are skipped, with the reason, where no GPU is visible.

A test about one chapter carries `@pytest.mark.chapter("05")` (or lives in tests/test_chNN_*.py);
`pytest --chapter 05` keeps only those of the chapters named (the GPU runner's `gpu-check --chapter 05`).
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser):
    parser.addoption("--chapter", action="append", default=[],
                     help="keep only the tests of this chapter (repeatable): marked chapter(NN) or in test_chNN_*.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "chapter(nn): the test is about chapter nn ('05'); see --chapter")


def item_chapter(item) -> str | None:
    mark = item.get_closest_marker("chapter")
    if mark is not None:
        return str(mark.args[0])
    m = re.match(r"test_ch(\d\d)_", Path(str(item.fspath)).name)
    return m[1] if m else None


def pytest_collection_modifyitems(config, items):
    chapters = set(config.getoption("--chapter"))
    if chapters:
        keep = [i for i in items if item_chapter(i) in chapters]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    from labkit.measure.device import has_gpu
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible: GPU tests run on the GPU runner (python -m labkit gpu-check)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """Build the book once per session with warnings as errors; returns the HTML folder."""
    exe = ROOT / ".venv" / "bin" / "jupyter-book"
    exe = str(exe) if exe.exists() else shutil.which("jupyter-book")
    r = subprocess.run([exe, "build", str(ROOT), "-W", "-n", "--keep-going"], capture_output=True, text=True)
    log = r.stdout + r.stderr
    (tmp_path_factory.mktemp("book") / "build.log").write_text(log)
    assert r.returncode == 0, "book build failed with -W -n:\n" + log[-6000:]
    # Sphinx's warnings (the Jupyter kernel's own start-up notices on stderr are not the book's)
    warnings = [ln for ln in log.splitlines() if "WARNING" in ln and "IPKernelApp" not in ln]
    assert not warnings, "book build printed warnings:\n" + "\n".join(warnings)[:6000]
    return ROOT / "_build" / "html"
