"""The book's CJK web font (_static/fonts/, written by tools/make_cjk_font.py) covers every CJK character the
book's pages use, and _static/cjk.css loads it for every CJK character. A failure here means a page gained a
character the committed subset lacks: run tools/make_cjk_font.py (its docstring says how) and commit the font."""
import importlib.util
import re
from pathlib import Path

from fontTools.ttLib import TTFont

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("make_cjk_font", ROOT / "tools" / "make_cjk_font.py")
make_cjk_font = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_cjk_font)


def test_subset_font_and_licence_are_committed():
    assert make_cjk_font.OUT.exists() and make_cjk_font.LICENSE.exists()
    assert make_cjk_font.OUT.read_bytes()[:4] == b"wOF2"
    assert "SIL OPEN FONT LICENSE Version 1.1" in make_cjk_font.LICENSE.read_text()
    assert make_cjk_font.OUT.stat().st_size < 512 * 1024, "the subset should stay small"


def test_the_book_uses_chinese():
    used = make_cjk_font.used_cjk()
    assert {"共", "享", "内", "存"} <= set(used), "the chapter 4 subtitle is no longer seen by the scan"
    assert any(p.startswith("book/") for files in used.values() for p in files)


def test_every_cjk_character_of_the_book_is_in_the_subset():
    cmap = TTFont(str(make_cjk_font.OUT)).getBestCmap()
    used = make_cjk_font.used_cjk()
    missing = {ch: files for ch, files in used.items() if ord(ch) not in cmap}
    assert not missing, ("characters missing from the CJK subset (regenerate with tools/make_cjk_font.py): "
                         + ", ".join(f"{ch} (U+{ord(ch):04X}) in {', '.join(f)}" for ch, f in missing.items()))
    for p in make_cjk_font.PUNCTUATION:   # the CJK punctuation is there whether used or not
        if 0x3001 <= p <= 0x3011 or 0xFF01 <= p <= 0xFF1F:
            assert p in cmap, f"U+{p:04X} missing from the subset"


def test_scan_finds_a_character_the_subset_lacks(tmp_path):
    # the check above must be able to fail: a page with a character outside the subset is reported
    (tmp_path / "book" / "99-x").mkdir(parents=True)
    (tmp_path / "intro.md").write_text("# T\n*龘*\n")
    (tmp_path / "book" / "99-x" / "index.md").write_text("*新章节*\n")
    (tmp_path / "labs" / "99-x").mkdir(parents=True)
    (tmp_path / "labs" / "99-x" / "lab.ipynb").write_text(
        '{"cells": [{"cell_type": "markdown", "source": ["## 实验"]}, {"cell_type": "code", "source": "# 代码"}]}')
    used = make_cjk_font.used_cjk(tmp_path)
    assert set(used) == {"龘", "新", "章", "节", "实", "验"}
    assert used["验"] == ["labs/99-x/lab.ipynb"]
    cmap = TTFont(str(make_cjk_font.OUT)).getBestCmap()
    assert ord("龘") not in cmap


def test_css_loads_the_subset_for_cjk_text():
    css = (ROOT / "_static" / "cjk.css").read_text()
    face = re.search(r"@font-face\s*{([^}]*)}", css)[1]
    assert 'font-family: "Book CJK"' in face and "font-display: swap" in face
    assert 'url("fonts/noto-sans-cjk-sc-subset.woff2")' in face
    assert " ".join(face.split("unicode-range:")[1].split(";")[0].split()) == make_cjk_font.UNICODE_RANGE
    for var in ("base", "heading"):
        assert f'--pst-font-family-{var}: var(--pst-font-family-base-system), "Book CJK";' in css
