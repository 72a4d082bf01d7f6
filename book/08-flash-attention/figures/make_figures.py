"""Draw the figures of chapter 08 as plain SVG (no plotting library): run it from anywhere,
`python book/08-flash-attention/figures/make_figures.py`, and commit the .svg files it writes beside it.

- dataflow.svg: one block of the tensor-core rungs: Q fragments held in registers, K and V tiles through a
  ring of shared-memory slots (cp.async in, ldmatrix out, .trans for V), S, P and O in registers.
- p-reuse.svg: the accumulators of two n8 tiles of S = Q K^T, lane by lane, and the A operand of one k16
  step of O += P V: the same lane holds the same (query, key) in both, so P is packed to bf16 in registers
  and never goes through shared memory (kernels/common/flash_mma.cuh, fa_pack_p).
- causal-tiles.svg: which (query tile, key tile) pairs a causal block computes in full, computes with a
  mask, or skips (rung 04), and inside one diagonal block what each of the 8 warps does (rung 05's tiles).
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))               # book/: the drawing helpers the figure scripts share
from svg_drawing import BLUE, GREEN, GREY, INK, RED, Svg, lane_colour, mix, owner_a, owner_c  # noqa: E402


def check_p_reuse():
    """Lane for lane, S tiles 2kk (keys 0-7) and 2kk+1 (keys 8-15) are the A operand of the k16 step of
    P V, with fa_pack_p's register order: a[0] = tile 2kk c0,c1; a[1] = c2,c3; a[2], a[3] the same of 2kk+1."""
    for r in range(16):
        for k in range(16):
            lane_c, e = owner_c(r, k % 8)
            lane_a, element = owner_a(r, k)
            reg = element // 2                           # two bf16 per 32-bit register
            assert lane_c == lane_a, (r, k)
            assert reg == 2 * (k // 8) + e // 2, (r, k)


def p_reuse():
    check_p_reuse()
    cw, ch = 34, 26
    top = 120
    x_s = 80
    x_a = x_s + 16 * cw + 260
    W, H = x_a + 16 * cw + 60, top + 16 * ch + 150
    s = Svg(W, H, "The accumulators of S = Q K^T are the A operand of O += P V, lane for lane")
    s.arrowhead()
    s.text(W / 2, 28, "One warp, 16 query rows, 16 keys: the fp32 accumulators of S are, lane for lane, "
           "the bf16 A operand of P V", 15, bold=True)
    s.text(W / 2, 48, "each cell: the lane holding that (query row, key) and where; lane = 4 g + t, colour by g, "
           "shade by t; lane 0 outlined in red", 12, fill="#555")

    def grid(x0, title, sub, label, caption):
        s.text(x0 + 8 * cw, top - 44, title, 14, bold=True)
        s.text(x0 + 8 * cw, top - 26, sub, 11, fill="#555")
        for k in range(16):
            s.text(x0 + k * cw + cw / 2, top - 6, str(k), 9, fill=GREY)
        for r in range(16):
            s.text(x0 - 6, top + r * ch + ch / 2 + 4, str(r), 9, anchor="end", fill=GREY)
            for k in range(16):
                lane, name = label(r, k)
                x, y = x0 + k * cw, top + r * ch
                s.rect(x, y, cw, ch, fill=lane_colour(lane), stroke="#ffffff")
                s.text(x + cw / 2, y + 13, str(lane), 11, bold=True)
                s.text(x + cw / 2, y + 23, name, 8, fill="#333333")
        for r in range(16):
            for k in range(16):
                if label(r, k)[0] == 0:
                    s.rect(x0 + k * cw + 1, top + r * ch + 1, cw - 2, ch - 2, stroke=RED, sw=2)
        s.rect(x0, top, 16 * cw, 16 * ch, stroke=INK, sw=1.5)
        s.line(x0, top + 8 * ch, x0 + 16 * cw, top + 8 * ch, sw=1.5)
        s.line(x0 + 8 * cw, top, x0 + 8 * cw, top + 16 * ch, sw=2.5)
        s.text(x0 - 8, top - 6, "q \\ key", 9, anchor="end", fill=GREY)
        for j, text in enumerate(caption):
            s.text(x0 + 8 * cw, top + 16 * ch + 24 + 16 * j, text, 11)

    grid(x_s, "S = Q K^T: two m16n8 accumulators (fp32)", "n8 tile 2kk (keys 0-7) | n8 tile 2kk+1 (keys 8-15)",
         lambda r, k: (owner_c(r, k % 8)[0], f"{'LR'[k // 8]}.c{owner_c(r, k % 8)[1]}"),
         ["L.c0, L.c1: row g, keys 2t, 2t+1 of the left tile; L.c2, L.c3: row g+8",
          "R.*: the same places in the right tile (keys + 8)",
          "after the online softmax these hold p = 2^(s * scale * log2 e - m)"])
    grid(x_a, "P as the A operand of one k16 step of P V", "16 x 16, rows = queries, k = keys: 4 registers of bf16 pairs",
         lambda r, k: (owner_a(r, k)[0], f"a[{owner_a(r, k)[1] // 2}]"),
         ["a[0]: row g, keys 2t, 2t+1; a[1]: row g+8", "a[2], a[3]: the same, keys + 8",
          "exactly what ldmatrix.x4 would have returned from a P tile in shared memory"])
    xm = x_s + 16 * cw + 25
    ym = top + 5 * ch
    s.line(xm, ym, x_a - 25, ym, sw=2, arrow=True)
    s.text((xm + x_a) / 2, ym - 34, "fa_pack_p: in registers", 13, bold=True)
    s.text((xm + x_a) / 2, ym - 16, "4 cvt to bf16x2 per lane", 11)
    for j, text in enumerate(["a[0] = bf16x2(L.c0, L.c1)", "a[1] = bf16x2(L.c2, L.c3)",
                              "a[2] = bf16x2(R.c0, R.c1)", "a[3] = bf16x2(R.c2, R.c3)"]):
        s.text((xm + x_a) / 2, ym + 24 + 18 * j, text, 11, fill="#333333")
    s.text((xm + x_a) / 2, ym + 120, "no store, no barrier,", 11, fill=GREEN, bold=True)
    s.text((xm + x_a) / 2, ym + 136, "no ldmatrix for P", 11, fill=GREEN, bold=True)
    s.save(HERE / "p-reuse.svg")


# ------------------------------------------------------------------------------------------------------
# One block's data flow

def dataflow():
    W, H = 1180, 470
    s = Svg(W, H, "Data flow of one block of the tensor-core FlashAttention rungs")
    s.arrowhead()
    s.text(W / 2, 28, "One block: 8 warps x 16 query rows (rung 05). Per key tile j: S = Q K^T, online softmax, "
           "O += P V, all in registers", 15, bold=True)
    # global memory
    s.rect(30, 70, 170, 330, fill="#f2f2f2", stroke=GREY, rx=6)
    s.text(115, 92, "global memory (HBM, L2)", 12, bold=True)
    for i, (name, y) in enumerate([("Q: this block's 128 rows", 130), ("K: all S rows of the head", 200),
                                   ("V: all S rows of the head", 270), ("O, LSE: 128 rows", 350)]):
        s.rect(45, y - 20, 140, 34, fill="#ffffff", stroke=INK)
        s.text(115, y + 1, name, 10)
    # shared memory
    s.rect(270, 70, 290, 330, fill=mix(BLUE, 0.88), stroke=BLUE, rx=6)
    s.text(415, 92, "shared memory (XOR-swizzled rows)", 12, bold=True)
    s.rect(290, 110, 250, 40, fill="#ffffff", stroke=INK)
    s.text(415, 135, "Q tile (later: the O staging tile)", 10)
    for i in range(3):
        y = 175 + 62 * i
        s.rect(290, y, 250, 52, fill="#ffffff", stroke=INK, dash=None if i < 2 else "4,3")
        s.text(415, y + 20, f"slot {i}: K tile {'j' if i == 0 else 'j+1' if i == 1 else '...'} (64 x d)", 10)
        s.text(415, y + 38, f"V tile {'j' if i == 0 else 'j+1' if i == 1 else '...'} (64 x d)", 10)
    s.text(415, 385, "a ring of STAGES slots (rung 05; one slot in 02-04)", 10, fill="#555")
    # arrows global -> shared
    s.line(185, 130, 288, 130, arrow=True)
    s.text(237, 122, "cp.async", 10)
    s.line(185, 200, 288, 195, arrow=True)
    s.line(185, 270, 288, 215, arrow=True)
    s.text(237, 250, "cp.async", 10)
    s.text(237, 264, "16 B each", 9, fill="#555")
    # registers of one warp
    s.rect(630, 70, 520, 330, fill=mix(GREEN, 0.9), stroke=GREEN, rx=6)
    s.text(890, 92, "registers of one warp (16 query rows)", 12, bold=True)
    boxes = [("Q fragments", "d/16 A operands, loaded once", 650, 110),
             ("m, l per row", "running max and sum (fp32)", 905, 110),
             ("S = Q K^T", "fp32 accumulators, 64 keys", 650, 210),
             ("P (bf16)", "S packed: the A operand of P V", 905, 210),
             ("O accumulator", "fp32, 16 x d, rescaled by alpha", 905, 310)]
    for title, sub, x, y in boxes:
        s.rect(x, y, 220, 56, fill="#ffffff", stroke=INK, rx=4)
        s.text(x + 110, y + 23, title, 12, bold=True)
        s.text(x + 110, y + 42, sub, 10, fill="#555")
    s.line(540, 130, 648, 138, arrow=True)
    s.text(595, 124, "ldmatrix", 10)
    s.line(540, 200, 648, 232, arrow=True)
    s.text(592, 204, "ldmatrix (K)", 10)
    s.polyline([(540, 262), (580, 338), (903, 338)], arrow=True, stroke=BLUE)
    s.text(740, 330, "ldmatrix.trans (V)", 10, fill=BLUE)
    s.line(760, 166, 760, 208, arrow=True)
    s.text(800, 192, "mma.sync", 10)
    s.line(870, 238, 903, 238, arrow=True, stroke=RED, sw=2)
    s.text(887, 285, "online softmax", 10, fill=RED, bold=True)
    s.text(887, 299, "in registers", 10, fill=RED, bold=True)
    s.line(1015, 166, 1015, 208, dash="3,3")
    s.text(1065, 192, "max, exp2, sum", 10)
    s.line(1015, 266, 1015, 308, arrow=True)
    s.text(1063, 292, "mma.sync", 10)
    s.polyline([(1015, 366), (1015, 425), (115, 425), (115, 366)], arrow=True, dash="4,3")
    s.text(560, 445, "after the last key tile: O / l to bf16, staged through the Q tile for 16-byte stores; "
           "LSE = m + ln l", 11, fill="#555")
    s.save(HERE / "dataflow.svg")


# ------------------------------------------------------------------------------------------------------
# Causal tiles: full, masked, skipped

def causal_tiles():
    S, BM, BN = 1024, 128, 64
    T, NK = S // BM, S // BN
    cw, ch = 30, 30
    x0, top = 90, 110
    zx = x0 + NK * cw + 230
    zcw, zch = 120, 26
    W, H = zx + 2 * zcw + 220, top + T * ch + 120
    s = Svg(W, H, "Causal attention: the tiles a block computes in full, with a mask, or skips")
    s.arrowhead()
    s.text(W / 2, 28, f"Causal attention at S = {S}: query tiles of {BM} rows, key tiles of {BN} keys (rung 05's tiles)",
           15, bold=True)
    s.text(W / 2, 48, "green: computed without a mask; orange: crosses the diagonal, masked element by element; "
           "white: skipped (rungs 02-03 visit and mask every one of them)", 12, fill="#555")
    full, masked = mix(GREEN, 0.45), mix("#ff7f0e", 0.35)
    s.text(x0 + NK * cw / 2, top - 26, "key tile", 11, fill="#555")
    for j in range(NK):
        s.text(x0 + j * cw + cw / 2, top - 8, str(j), 9, fill=GREY)
    counts = {"full": 0, "masked": 0, "skipped": 0}
    for i in range(T):
        s.text(x0 - 8, top + i * ch + ch / 2 + 4, str(i), 9, anchor="end", fill=GREY)
        for j in range(NK):
            first_key, last_key = j * BN, j * BN + BN - 1
            last_row = i * BM + BM - 1
            if first_key > last_row:
                kind, fill = "skipped", "#ffffff"
            elif last_key > i * BM:
                kind, fill = "masked", masked
            else:
                kind, fill = "full", full
            counts[kind] += 1
            s.rect(x0 + j * cw, top + i * ch, cw, ch, fill=fill, stroke="#cccccc")
    s.rect(x0, top, NK * cw, T * ch, stroke=INK, sw=1.5)
    s.line(x0, top, x0 + NK * cw, top + T * ch, stroke=RED, sw=1.5, dash="5,3")
    s.text(x0 - 8, top - 8, "q \\ k", 9, anchor="end", fill=GREY)
    s.text(x0 - 30, top + T * ch + 26, "rows: query tiles", 10, anchor="start", fill="#555")
    s.text(x0 + NK * cw / 2, top + T * ch + 26,
           f"{counts['full']} full + {counts['masked']} masked of {T * NK} pairs visited "
           f"({(counts['full'] + counts['masked']) / (T * NK):.0%}); {counts['skipped']} skipped", 12, bold=True)
    s.text(x0 + NK * cw / 2, top + T * ch + 44, "red dashes: the diagonal, query i sees keys j <= i", 11, fill=RED)
    # the zoom: query tile i = 3, key tiles 6 and 7, per warp
    i = 3
    s.rect(x0 + 2 * i * cw, top + i * ch, 2 * cw, ch, stroke=BLUE, sw=3)
    s.line(x0 + 2 * i * cw + 2 * cw, top + i * ch, zx - 150, top + 4, stroke=BLUE, dash="3,3")
    s.text(zx + zcw, top - 26, f"query tile {i}, key tiles {2 * i} and {2 * i + 1}, warp by warp", 12, bold=True)
    for jj in range(2):
        s.text(zx + jj * zcw + zcw / 2, top - 8, f"keys {(2 * i + jj) * BN}-{(2 * i + jj) * BN + BN - 1}", 10, fill=GREY)
    for w in range(8):
        w0 = i * BM + 16 * w
        s.text(zx - 8, top + w * zch + zch / 2 + 4, f"warp {w}: rows {w0}-{w0 + 15}", 10, anchor="end", fill=GREY)
        for jj in range(2):
            n0 = (2 * i + jj) * BN
            if n0 > w0 + 15:
                fill, what = "#ffffff", "skipped"
            elif n0 + BN - 1 > w0:
                fill, what = masked, "masked"
            else:
                fill, what = full, "full"
            s.rect(zx + jj * zcw, top + w * zch, zcw, zch, fill=fill, stroke="#cccccc")
            s.text(zx + jj * zcw + zcw / 2, top + w * zch + 17, what, 10)
    s.rect(zx, top, 2 * zcw, 8 * zch, stroke=INK, sw=1.5)
    s.line(zx, top, zx + 2 * zcw, top + 8 * zch, stroke=RED, sw=1.5, dash="5,3")
    for j, text in enumerate(["a warp skips a key tile that lies wholly", "above its own 16 rows' diagonal;",
                              "the block's barriers stay outside", "the warp-uniform branch"]):
        s.text(zx + 2 * zcw + 14, top + 40 + 16 * j, text, 11, anchor="start", fill="#333333")
    s.save(HERE / "causal-tiles.svg")


if __name__ == "__main__":
    p_reuse()
    dataflow()
    causal_tiles()
    print("wrote", ", ".join(p.name for p in sorted(HERE.glob("*.svg"))))
