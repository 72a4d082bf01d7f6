"""Write the book's CJK web font: a subset of Noto Sans CJK SC holding only the characters the book uses.

The chapter pages carry Chinese subtitles; a reader's machine without a CJK font would show them as empty
boxes. `_static/cjk.css` loads this subset (`_static/fonts/noto-sans-cjk-sc-subset.woff2`, SIL OFL 1.1,
licence in `_static/fonts/LICENSE-noto-sans-cjk-sc.txt`), so the subtitles render offline.

Regenerate after adding or changing Chinese text (tests/test_cjk_font.py, a CPU test, fails when a page uses
a CJK character the committed subset lacks), then commit both files under _static/fonts/:

    apt-get install -y fonts-noto-cjk
    .venv/bin/pip install fonttools brotli
    .venv/bin/python tools/make_cjk_font.py

The build itself does not need fontTools: the subset is generated once and committed.
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc")
SOURCE_NAME = "Noto Sans CJK SC"              # the face inside the collection
DEBIAN_COPYRIGHT = Path("/usr/share/doc/fonts-noto-cjk/copyright")
FONTS = ROOT / "_static" / "fonts"
OUT = FONTS / "noto-sans-cjk-sc-subset.woff2"
LICENSE = FONTS / "LICENSE-noto-sans-cjk-sc.txt"

# What counts as CJK here: ideographs (with extension A and the compatibility block), kana, Hangul, CJK
# symbols and punctuation, and the full-width forms (，。：（） …). Latin punctuation (— “ ”) stays with the
# theme's own fonts.
CJK_RANGES = [
    (0x2E80, 0x2FDF),    # CJK radicals, Kangxi radicals
    (0x3000, 0x303F),    # CJK symbols and punctuation
    (0x3040, 0x30FF),    # Hiragana, Katakana
    (0x3100, 0x31FF),    # Bopomofo, Hangul compatibility jamo, kana extensions
    (0x3200, 0x33FF),    # enclosed CJK, CJK compatibility
    (0x3400, 0x4DBF),    # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),    # CJK unified ideographs
    (0xAC00, 0xD7AF),    # Hangul syllables
    (0xF900, 0xFAFF),    # CJK compatibility ideographs
    (0xFE30, 0xFE4F),    # CJK compatibility forms
    (0xFF00, 0xFFEF),    # half-width and full-width forms
]
# Always in the subset, used or not, so that a new sentence's punctuation does not need a regeneration.
PUNCTUATION = [*range(0x3000, 0x3040), *range(0xFF01, 0xFF66)]
# The CSS unicode-range of the @font-face (must cover CJK_RANGES: tests/test_cjk_font.py checks it).
UNICODE_RANGE = ", ".join(f"U+{a:04X}-{b:04X}" for a, b in CJK_RANGES)


def is_cjk(ch: str) -> bool:
    c = ord(ch)
    return any(a <= c <= b for a, b in CJK_RANGES)


def source_texts(root: Path = ROOT):
    """(path, text) for every page source: intro.md, book/**/*.md, and the labs' notebooks' Markdown cells."""
    files = [root / "intro.md", *sorted((root / "book").rglob("*.md"))]
    for f in files:
        if f.exists():
            yield f, f.read_text(encoding="utf-8")
    for nb in sorted((root / "labs").glob("*/*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8")).get("cells", [])
        text = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                         for c in cells if c.get("cell_type") == "markdown")
        yield nb, text


def used_cjk(root: Path = ROOT) -> dict[str, list[str]]:
    """Each CJK character the book uses, with the files (relative to root) that use it."""
    used: dict[str, list[str]] = {}
    for path, text in source_texts(root):
        for ch in sorted({c for c in text if is_cjk(c)}):
            used.setdefault(ch, []).append(str(path.relative_to(root)))
    return used


def licence_text() -> str:
    """The OFL text from Debian's copyright file, with the font's own copyright line above it."""
    m = re.search(r"^License: SIL-1\.1\n((?: .*\n)+)", DEBIAN_COPYRIGHT.read_text(encoding="utf-8"), re.M)
    body = "\n".join("" if ln.strip() == "." else ln[1:] for ln in m[1].splitlines())
    return ("Noto Sans CJK SC (subset) -- _static/fonts/noto-sans-cjk-sc-subset.woff2\n"
            "A subset of NotoSansCJK-Regular.ttc (face 'Noto Sans CJK SC') from https://github.com/googlefonts/noto-cjk\n"
            "(Debian package fonts-noto-cjk), written by tools/make_cjk_font.py.\n\n"
            "Copyright 2014-2021 Adobe (http://www.adobe.com/), with Reserved Font Name 'Source'.\n\n"
            "This Font Software is licensed under the SIL Open Font License, Version 1.1.\n"
            "This license is copied below, and is also available with a FAQ at: https://openfontlicense.org\n\n"
            + body.strip() + "\n")


def main() -> int:
    from fontTools import subset
    from fontTools.ttLib import TTCollection

    used = used_cjk()
    index = next(i for i, f in enumerate(TTCollection(str(SOURCE)).fonts)
                 if f["name"].getDebugName(4) == SOURCE_NAME)
    options = subset.Options()
    options.flavor = "woff2"
    options.font_number = index
    options.layout_features = ["*"]          # keep vertical forms, locl and kerning where present
    options.name_IDs = ["*"]                 # keep the copyright and licence records
    options.name_languages = ["*"]
    options.notdef_outline = True
    options.hinting = False                  # CFF hints add size and do nothing useful at screen sizes
    font = subset.load_font(str(SOURCE), options)
    cmap = font.getBestCmap()
    codepoints = sorted({ord(c) for c in used} | {c for c in PUNCTUATION if c in cmap})
    missing = [chr(c) for c in codepoints if c not in cmap]
    if missing:
        print(f"{SOURCE_NAME} has no glyph for: {''.join(missing)}", file=sys.stderr)
        return 1
    sub = subset.Subsetter(options)
    sub.populate(unicodes=codepoints)
    sub.subset(font)
    FONTS.mkdir(parents=True, exist_ok=True)
    subset.save_font(font, str(OUT), options)
    LICENSE.write_text(licence_text(), encoding="utf-8")
    print(f"{OUT.relative_to(ROOT)}: {len(used)} characters used by the book, {len(codepoints)} in all, "
          f"{OUT.stat().st_size / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
