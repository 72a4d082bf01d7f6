"""The book's drawn figures (book/NN-*/figures/*.svg) are what their scripts draw: each make_figures.py,
run on a copy of its folder, writes exactly the committed files (no figure edited by hand, none left stale)."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from labkit.paths import ROOT

SCRIPTS = sorted((ROOT / "book").glob("*/figures/make_figures.py"))


def test_there_are_figure_scripts():
    assert len(SCRIPTS) >= 3, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.parts[-3])
def test_a_figure_script_redraws_its_committed_figures(script, tmp_path):
    book = tmp_path / "book"
    figures = book / script.parts[-3] / "figures"
    figures.mkdir(parents=True)
    shutil.copy(ROOT / "book" / "svg_drawing.py", book)
    shutil.copy(script, figures)
    subprocess.run([sys.executable, str(figures / script.name)], check=True, capture_output=True, cwd=tmp_path)
    drawn = {p.name: p.read_text() for p in figures.glob("*.svg")}
    committed = {p.name: p.read_text() for p in script.parent.glob("*.svg")}
    assert sorted(drawn) == sorted(committed)
    stale = [name for name in drawn if drawn[name] != committed[name]]
    assert not stale, f"{stale}: run {script.relative_to(ROOT)} and commit what it writes"
