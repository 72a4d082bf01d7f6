"""Draw the figures of chapter 06 as plain SVG (no plotting library): run it from anywhere,
`python book/06-gemm-tensor-cores/figures/make_figures.py`, and commit the .svg files it writes beside it.

- mma-fragments.svg: which lane holds which element of A (16x16), B (16x8) and C (16x8) of one
  mma.sync.m16n8k16 (the PTX ISA's fragment layout: lane = 4 * groupID + threadID_in_group).
- smem-swizzle.svg: eight rows of a shared tile in 16-byte chunks, drawn against the 8 bank groups of a
  128-byte line: dense, padded by 16 bytes, XOR-swizzled; the chunks one ldmatrix matrix reads in red.
- pipeline.svg: copies and mma's of one block over time with 1 slot, 2 slots and a 3-slot ring.
- tile-order.svg: the first wave of 132 blocks over the 64 x 32 tiles of C (8192^3, 128x256 tiles), in
  row-major order and grouped by 8 tile rows, with the panels of A and B that wave reads.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))               # book/: the drawing helpers the figure scripts share
from svg_drawing import GREY, HUES, INK, RED, Svg, lane_colour, mix, owner_a, owner_b, owner_c  # noqa: E402


def check_fragments():
    # every lane holds exactly 8 A, 4 B, 4 C elements, each once
    for owner, rows, cols, per in ((owner_a, 16, 16, 8), (owner_b, 16, 8, 4), (owner_c, 16, 8, 4)):
        seen = {}
        for r in range(rows):
            for c in range(cols):
                lane, i = owner(r, c)
                assert (lane, i) not in seen, (owner.__name__, r, c)
                seen[(lane, i)] = (r, c)
        assert len(seen) == 32 * per and {lane for lane, _ in seen} == set(range(32))


def fragments():
    check_fragments()
    cw, ch = 36, 30
    top = 112
    s = Svg(1340, top + 16 * ch + 100, "Which lane of a warp holds which element of A, B and C in mma.sync.m16n8k16")
    s.text(670, 26, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: one warp, D (16x8) += A (16x16) B (16x8)",
           15, bold=True)
    s.text(670, 46, "each cell: the lane that holds the element (large) and the element's place in that lane's "
           "registers (small); lane = 4 g + t, colour by g (row group), shade by t", 12, fill="#555")

    def panel(x0, rows, cols, owner, name, reg, row_lab, col_lab, caption):
        s.text(x0 + cols * cw / 2, top - 30, name, 14, bold=True)
        s.text(x0 + cols * cw / 2, top - 12, col_lab, 11, fill="#555")
        for c in range(cols):
            s.text(x0 + c * cw + cw / 2, top - 1, str(c), 9, fill=GREY)
        for r in range(rows):
            s.text(x0 - 6, top + r * ch + ch / 2 + 4, str(r), 9, anchor="end", fill=GREY)
            for c in range(cols):
                lane, i = owner(r, c)
                x, y = x0 + c * cw, top + r * ch
                s.rect(x, y, cw, ch, fill=lane_colour(lane), stroke="#ffffff", sw=1)
                s.text(x + cw / 2, y + 15, str(lane), 12, bold=True)
                s.text(x + cw / 2, y + 26, f"{reg}{i}", 8, fill="#333")
        s.rect(x0, top, cols * cw, rows * ch, stroke=INK, sw=1.5)
        # the halves of the tile: rows 0-7 / 8-15 (and columns 0-7 / 8-15 of A)
        s.line(x0, top + 8 * ch, x0 + cols * cw, top + 8 * ch, sw=1.5)
        if cols == 16:
            s.line(x0 + 8 * cw, top, x0 + 8 * cw, top + rows * ch, sw=1.5)
        s.text(x0 - 24, top + rows * ch / 2, row_lab, 11, fill="#555")
        for j, line in enumerate(caption):
            s.text(x0 + cols * cw / 2, top + rows * ch + 22 + 15 * j, line, 11)

    panel(50, 16, 16, owner_a, "A (16 x 16, row-major): 4 registers, a0-a7", "a", "m", "k",
          ["a0,a1: row g, k = 2t, 2t+1    a2,a3: row g+8", "a4,a5: row g, k = 2t+8, 2t+9    a6,a7: row g+8, k + 8",
           "= ldmatrix.x4: four 8x8 matrices (the quadrants)"])
    panel(700, 16, 8, owner_b, "B (16 x 8, k x n): 2 registers", "b", "k", "n",
          ["b0,b1: k = 2t, 2t+1, column n = g", "b2,b3: k + 8", "pairs run DOWN k: ldmatrix .trans"])
    panel(1040, 16, 8, owner_c, "C, D (16 x 8, fp32): 4 registers", "c", "m", "n",
          ["c0,c1: row g, n = 2t, 2t+1", "c2,c3: row g+8", "the epilogue stores these as bf16x2"])
    s.save(HERE / "mma-fragments.svg")


# ------------------------------------------------------------------------------------------------------
# Shared-memory layouts of a tile: dense, padded, XOR-swizzled, against the 8 bank groups of 16 bytes

def swizzle():
    cw, ch = 46, 24
    gap = 70
    top = 110
    lines_max = 9
    W = 3 * 8 * cw + 2 * gap + 80
    s = Svg(W, top + lines_max * ch + 110, "Eight rows of a shared tile in 16-byte chunks: dense, padded, swizzled")
    s.text(W / 2, 26, "Eight 128-byte rows of a tile in shared memory, drawn as 128-byte lines of 8 bank groups "
           "(4 banks of 4 bytes each)", 15, bold=True)
    s.text(W / 2, 46, "cell r.c: chunk c of row r. Red: the chunks one ldmatrix 8x8 matrix reads (chunk 0 of "
           "rows 0-7). Same column = same banks = one more wavefront.", 12, fill="#555")

    def panel(x0, title, sub, place, pad=False):
        s.text(x0 + 4 * cw, top - 40, title, 14, bold=True)
        s.text(x0 + 4 * cw, top - 24, sub, 11, fill="#555")
        for gcol in range(8):
            s.text(x0 + gcol * cw + cw / 2, top - 6, f"banks {4 * gcol}-{4 * gcol + 3}", 8, fill=GREY)
        used = {}
        for r in range(8):
            for c in range(8):
                used[place(r, c)] = (r, c)
        nlines = max(l for l, _ in used) + 1
        for ln in range(nlines):
            for gcol in range(8):
                x, y = x0 + gcol * cw, top + ln * ch
                if (ln, gcol) in used:
                    r, c = used[(ln, gcol)]
                    fill = RED if c == 0 else mix(HUES[r], 0.7)
                    s.rect(x, y, cw, ch, fill=fill, stroke="#ffffff")
                    s.text(x + cw / 2, y + 16, f"{r}.{c}", 11, fill="#ffffff" if c == 0 else INK, bold=c == 0)
                else:
                    s.rect(x, y, cw, ch, fill="#dddddd", stroke="#ffffff")
                    s.text(x + cw / 2, y + 16, "pad" if pad else "", 9, fill=GREY)
        s.rect(x0, top, 8 * cw, nlines * ch, stroke=INK, sw=1.5)
        reds = [g for (l, g), (r, c) in used.items() if c == 0]
        worst = max(reds.count(g) for g in range(8))
        verdict = "8 reads in one bank group: 8 wavefronts" if worst == 8 else "8 reads, 8 bank groups: 1 wavefront"
        s.text(x0 + 4 * cw, top + nlines * ch + 22, verdict, 12, bold=True, fill=RED if worst > 1 else "#2ca02c")
        return nlines

    panel(40, "dense rows", "chunk c of row r at 16 c + 128 r", lambda r, c: (r, c))
    panel(40 + 8 * cw + gap, "padded by 16 bytes", "row pitch 144 bytes: 1/8 of the tile wasted",
          lambda r, c: divmod(9 * r + c, 8), pad=True)
    panel(40 + 2 * (8 * cw + gap), "XOR swizzle", "chunk c of row r stored at chunk c ^ (r % 8)",
          lambda r, c: (r, c ^ (r % 8)))
    s.text(W / 2, top + lines_max * ch + 70, "Rows of 64 bytes (the A tile at BK = 32) pair up in a line: there the "
           "kernels XOR with (r / 2) % 4 instead.", 11, fill="#555")
    s.save(HERE / "smem-swizzle.svg")


# ------------------------------------------------------------------------------------------------------
# The pipeline: copies and mma's of one block over time

def pipeline():
    unit = 40            # pixels per unit of time: a k-tile's mma's take 2 units, a copy's latency 3
    copy, mma, end = 3, 2, 24
    left, top, row_h = 190, 84, 92
    W = left + end * unit + 90
    s = Svg(W, top + 3 * row_h + 50, "Copies and tensor-core work of one block with one slot, two slots and a three-slot ring")
    s.arrowhead()
    s.text(W / 2, 26, "One block over time: copies in flight (grey) and mma work (blue) of k-tiles 0, 1, 2, ...",
           15, bold=True)
    s.text(W / 2, 46, "drawn with a copy latency of 1.5 k-tiles of mma work; black tick: the barrier before a "
           "k-tile is read", 12, fill="#555")

    def box(x, y, w, h, label, fill):
        s.rect(left + x * unit, y, w * unit, h, fill=fill, stroke="#ffffff")
        s.text(left + (x + w / 2) * unit, y + h / 2 + 4, label, 10)

    rows = [("1 slot (03, STAGES=1)", 1), ("2 slots (03, 04)", 2), ("3-slot ring (05)", 3)]
    for j, (label, stages) in enumerate(rows):
        y = top + j * row_h
        s.text(left - 12, y + 30, label, 12, anchor="end", bold=True)
        in_flight = ["no copy in flight during mma", "1 k-tile in flight during mma",
                     "2 k-tiles in flight during mma"][stages - 1]
        s.text(left - 12, y + 46, in_flight, 10,
               anchor="end", fill="#555")
        begin, finish = [], []
        for kt in range(40):
            if stages == 1:
                issue = finish[kt - 1] if kt else 0
            else:
                issue = 0 if kt < stages - 1 else begin[kt - (stages - 1)]
            b = max(issue + copy, finish[kt - 1] if kt else 0)
            if b + mma > end:
                if issue + copy <= end:
                    box(issue, y + (kt % 2) * 18, copy, 16, f"copy {kt}", "#c8c8c8")
                break
            begin.append(b)
            finish.append(b + mma)
            box(issue, y + (kt % 2) * 18, copy, 16, f"copy {kt}", "#c8c8c8")
            s.line(left + b * unit, y + 38, left + b * unit, y + 66, sw=2)
            box(b, y + 40, mma, 24, f"mma {kt}", mix(HUES[0], 0.45))
        busy = mma / (begin[-1] - begin[-2])        # steady state: mma time per k-tile period
        s.text(left + end * unit + 6, y + 57, f"{100 * busy:.0f}%", 11, anchor="start", bold=True)
        s.line(left, y + 72, left + end * unit, y + 72, stroke=GREY, sw=0.5)
    s.text(left + end * unit + 6, top - 8, "mma busy (steady)", 10, anchor="start", fill="#555")
    s.line(left, top + 3 * row_h, left + end * unit, top + 3 * row_h, arrow=True)
    s.text(left + end * unit / 2, top + 3 * row_h + 20, "time", 12)
    s.save(HERE / "pipeline.svg")


# ------------------------------------------------------------------------------------------------------
# The order of the tiles: the first wave of 132 blocks

def tile_order():
    tm, tn, wave, group = 64, 32, 132, 8
    cw, ch = 12, 6                   # a tile is 128 x 256: twice as wide as tall
    top, gap = 112, 120
    W = 2 * (tn * cw) + gap + 200
    s = Svg(W, top + tm * ch + 70, "The first wave of 132 blocks over the 64 x 32 tiles of C, row-major and grouped by 8")
    s.text(W / 2, 26, "8192 x 8192 x 8192, 128 x 256 tiles: 64 x 32 = 2048 tiles of C, 132 resident at once",
           15, bold=True)
    s.text(W / 2, 46, "shaded: the first wave; red bars: the panels of A (2 MiB each) and B (4 MiB each) it reads",
           12, fill="#555")

    def order_row_major(b):
        return divmod(b, tn)

    def order_grouped(b):
        per = group * tn
        first = (b // per) * group
        rows = min(tm - first, group)
        return first + (b % per) % rows, (b % per) // rows

    for j, (title, order) in enumerate((("row-major (06: 2D grid)", order_row_major),
                                        ("grouped, GROUP_M = 8 (07)", order_grouped))):
        x0 = 100 + j * (tn * cw + gap)
        tiles = {order(b) for b in range(wave)}
        rows = {r for r, _ in tiles}
        cols = {c for _, c in tiles}
        s.text(x0 + tn * cw / 2, top - 36, title, 14, bold=True)
        for r in range(tm):
            for c in range(tn):
                fill = mix(HUES[0], 0.3) if (r, c) in tiles else "#f2f2f2"
                s.rect(x0 + c * cw, top + r * ch, cw, ch, fill=fill, stroke="#ffffff", sw=0.5)
        s.rect(x0, top, tn * cw, tm * ch, stroke=INK, sw=1)
        for r in rows:                  # A panels: bars left of the grid
            s.rect(x0 - 12, top + r * ch, 7, ch, fill=RED, stroke="none")
        for c in cols:                  # B panels: bars above the grid
            s.rect(x0 + c * cw, top - 14, cw, 7, fill=RED, stroke="none")
        s.text(x0 - 16, top + 10, "A", 11, anchor="end", fill=RED)
        s.text(x0 - 16, top - 7, "B", 11, anchor="end", fill=RED)
        a_mib, b_mib = 2 * len(rows), 4 * len(cols)
        s.text(x0 + tn * cw / 2, top + tm * ch + 22, f"{len(rows)} panels of A + {len(cols)} of B", 12)
        s.text(x0 + tn * cw / 2, top + tm * ch + 40, f"= {a_mib + b_mib} MiB per wave (L2: 60 MiB)", 12, bold=True)
    s.save(HERE / "tile-order.svg")


if __name__ == "__main__":
    fragments()
    swizzle()
    pipeline()
    tile_order()
    print("wrote", ", ".join(sorted(p.name for p in HERE.glob("*.svg"))))
