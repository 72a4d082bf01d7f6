"""Draw the figures of chapter 07 as plain SVG (no plotting library): run it from anywhere,
`python book/07-gemm-hopper/figures/make_figures.py`, and commit the .svg files it writes beside it.

- swizzle-128b.svg: one 1024-byte atom of a K-major bf16 tile (8 rows of 64 bf16 = 8 x 128 bytes, in
  16-byte chunks), stored plainly and in TMA's / wgmma's 128-byte swizzle (chunk c of row r at chunk
  position c XOR (r mod 8)); the chunks one 16-wide K slice reads are outlined, and the bank groups they
  fall in are counted.
- ring.svg: the ring of chapter 07's rungs 03-07: STAGES slots, each with a full and an empty mbarrier;
  the producer's and the consumers' waits, and the slot and phase parity of each K slice.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))               # book/: the drawing helpers the figure scripts share
from svg_drawing import GREY, HUES, INK, RED, Svg, mix  # noqa: E402


# ------------------------------------------------------------------------------------------------------
# The 128-byte swizzle

def swizzled_position(row: int, chunk: int) -> int:
    """Chunk position (0-7, i.e. bank group: banks 4p .. 4p+3) where logical chunk `chunk` of `row` is stored
    in the 128-byte swizzle: byte address bits 4-6 XOR bits 7-9 (the row within the 1024-byte atom)."""
    return chunk ^ (row % 8)


def atom_panel(s: Svg, x0: float, y0: float, swizzled: bool, title: str, note: str):
    cw, ch = 50, 30
    s.text(x0 + 4 * cw, y0 - 34, title, size=14, bold=True)
    s.text(x0 + 4 * cw, y0 - 16, note, size=11, fill="#555")
    for p in range(8):
        s.text(x0 + p * cw + cw / 2, y0 + 8 * ch + 16, f"{4 * p}-{4 * p + 3}", size=10, fill=GREY)
    s.text(x0 - 8, y0 + 8 * ch + 16, "banks", size=10, anchor="end", fill=GREY)
    for r in range(8):
        s.text(x0 - 8, y0 + r * ch + ch / 2 + 4, f"row {r}", size=11, anchor="end")
        s.text(x0 + 8 * cw + 8, y0 + r * ch + ch / 2 + 4, f"+{128 * r} B", size=10, anchor="start", fill=GREY)
        for c in range(8):
            p = swizzled_position(r, c) if swizzled else c
            x, y = x0 + p * cw, y0 + r * ch
            hot = c in (0, 1)          # the first 16-wide K slice: logical chunks 0 and 1 (32 bytes per row)
            s.rect(x, y, cw, ch, fill=mix(HUES[c], 0.25 if hot else 0.72), stroke="#ffffff", sw=1.5)
            s.text(x + cw / 2, y + ch / 2 + 4, f"k{8 * c}-{8 * c + 7}", size=10,
                   fill="#ffffff" if hot else INK, bold=hot)
            if hot:
                s.rect(x + 1.5, y + 1.5, cw - 3, ch - 3, stroke=RED, sw=2.5)
    s.rect(x0, y0, 8 * cw, 8 * ch, stroke=INK, sw=1.2)


def swizzle_figure():
    s = Svg(1060, 470, "The 128-byte swizzle of one 1024-byte atom of a K-major bf16 tile, as TMA writes it "
                       "and the wgmma descriptor reads it")
    s.text(530, 26, "One swizzle atom: 8 rows of a K-major bf16 tile, 64 elements (128 bytes) per row, "
                    "in 16-byte chunks", size=15, bold=True)
    atom_panel(s, 60, 100, False, "stored plainly (no swizzle)",
               "chunk c of every row sits in bank group c")
    atom_panel(s, 585, 100, True, "128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B)",
               "chunk c of row r sits at position c XOR (r mod 8)")
    y = 400
    s.text(70, y, "Red: the 32 bytes per row that the first k16 slice (k = 0-15) reads.", size=12, anchor="start")
    s.text(70, y + 20, "Plain: all eight rows' chunk 0 share banks 0-3 (an 8-way conflict per read); "
                       "swizzled: the eight rows spread over all 32 banks.", size=12, anchor="start")
    s.text(70, y + 40, "wgmma descriptor: start address (1024-byte aligned), swizzle mode 128 B, stride byte "
                       "offset 1024 (the next atom, rows 8-15); slice kk of the 64-wide tile: start + 32 kk bytes.",
           size=12, anchor="start")
    s.save(HERE / "swizzle-128b.svg")


# ------------------------------------------------------------------------------------------------------
# The ring of full and empty barriers

def ring_figure(stages: int = 4, slices: int = 12):
    s = Svg(1000, 560, "The ring of shared-memory stages with full and empty mbarriers: who waits for what, "
                       "and the slot and parity of each K slice")
    s.arrowhead()
    s.text(500, 26, f"A ring of {stages} stages: the producer fills, the consumers drain, two mbarriers per stage",
           size=15, bold=True)
    # producer, stages, consumers
    px, cx, sx0, sy, sw_, sh = 30, 790, 255, 70, 108, 150
    s.rect(px, 110, 190, 80, fill="#fdf0e6", stroke="#ff7f0e", sw=1.5, rx=6)
    s.text(px + 95, 132, "producer warpgroup", size=13, bold=True)
    s.text(px + 95, 150, "one thread, 40 registers", size=11, fill="#555")
    s.text(px + 95, 168, "wait empty[s] (parity ph^1)", size=11, mono=True)
    s.text(px + 95, 184, "expect_tx + 2 TMA copies", size=11, mono=True)
    for i, name in enumerate(("consumer warpgroup 1", "consumer warpgroup 2")):
        y = 80 + 100 * i
        s.rect(cx, y, 200, 80, fill="#e8f1fa", stroke="#1f77b4", sw=1.5, rx=6)
        s.text(cx + 100, y + 22, name, size=13, bold=True)
        s.text(cx + 100, y + 40, f"rows {64 * i}-{64 * i + 63}, 232 registers", size=11, fill="#555")
        s.text(cx + 100, y + 58, "wait full[s] (parity ph)", size=11, mono=True)
        s.text(cx + 100, y + 74, "4 wgmma, wait, arrive", size=11, mono=True)
    for st in range(stages):
        x = sx0 + st * (sw_ + 10)
        s.rect(x, sy, sw_, sh, fill="#f4f4f4", stroke=INK, sw=1.2)
        s.text(x + sw_ / 2, sy + 18, f"stage {st}", size=12, bold=True)
        s.rect(x + 8, sy + 28, sw_ - 16, 34, fill="#ffffff", stroke=GREY)
        s.text(x + sw_ / 2, sy + 49, "A 128 x 64", size=10)
        s.rect(x + 8, sy + 66, sw_ - 16, 34, fill="#ffffff", stroke=GREY)
        s.text(x + sw_ / 2, sy + 87, "B 256 x 64", size=10)
        s.rect(x + 8, sy + 108, (sw_ - 20) / 2, 32, fill="#e3f0e3", stroke="#2ca02c")
        s.text(x + 8 + (sw_ - 20) / 4, sy + 122, "full", size=10)
        s.text(x + 8 + (sw_ - 20) / 4, sy + 135, "1 + tx", size=9, fill="#555")
        s.rect(x + 12 + (sw_ - 20) / 2, sy + 108, (sw_ - 20) / 2, 32, fill="#f7e3e3", stroke=RED)
        s.text(x + 12 + 3 * (sw_ - 20) / 4, sy + 122, "empty", size=10)
        s.text(x + 12 + 3 * (sw_ - 20) / 4, sy + 135, "2 arrivals", size=9, fill="#555")
    s.line(px + 190, 150, sx0 - 6, 150, arrow=True, sw=1.5)
    s.text((px + 190 + sx0) / 2, 142, "TMA", size=11)
    s.line(sx0 + stages * (sw_ + 10) - 4, 120, cx - 6, 120, arrow=True, sw=1.5)
    s.line(sx0 + stages * (sw_ + 10) - 4, 200, cx - 6, 200, arrow=True, sw=1.5)
    s.text((sx0 + stages * (sw_ + 10) + cx) / 2, 112, "wgmma reads", size=11)
    s.text(500, 290, "full[s] completes a phase when its one arrival (arrive.expect_tx, 48 KB) is made AND "
                     "all 48 KB have landed; empty[s] when both consumers arrived.", size=12)
    # the slice -> slot / parity table
    y0, x0, cw = 330, 190, 62
    s.text(x0 - 12, y0 + 18, "K slice kt", size=12, anchor="end", bold=True)
    s.text(x0 - 12, y0 + 48, "stage kt % 4", size=12, anchor="end")
    s.text(x0 - 12, y0 + 78, "consumers wait full, parity", size=12, anchor="end")
    s.text(x0 - 12, y0 + 108, "producer waits empty, parity", size=12, anchor="end")
    for kt in range(slices):
        x = x0 + kt * cw
        st, ph = kt % stages, (kt // stages) & 1
        fill = mix(HUES[st], 0.6)
        for j, label in enumerate((str(kt), str(st), str(ph), str(ph ^ 1))):
            s.rect(x, y0 + 30 * j, cw - 4, 26, fill=fill if j < 2 else ("#ffffff" if (ph if j == 2 else ph ^ 1)
                                                                          else "#eeeeee"), stroke=GREY)
            s.text(x + (cw - 4) / 2, y0 + 30 * j + 18, label, size=12, bold=(j == 0))
    s.text(500, y0 + 150, "The parity flips each time the ring wraps. A fresh barrier is in phase 0, and a wait "
                          "for parity 1 returns at once (the phase", size=12)
    s.text(500, y0 + 168, "before it counts as complete): so the producer's first pass over the ring, waiting "
                          "empty with parity ph^1 = 1, does not block.", size=12)
    s.text(500, y0 + 192, "Wait for the wrong parity and the wait either passes a phase early (reading a stage "
                          "still being written) or never returns (a hang).", size=12, fill=RED)
    s.save(HERE / "ring.svg")


if __name__ == "__main__":
    swizzle_figure()
    ring_figure()
    print("wrote", ", ".join(sorted(p.name for p in HERE.glob("*.svg"))))
