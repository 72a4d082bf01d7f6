"""What the chapters' figure scripts (book/NN-*/figures/make_figures.py) draw with: a few SVG primitives
written as plain text (no plotting library, so a figure's file changes only when its drawing does), the
course's colours, and the lane owners of the m16n8k16 fragments that chapters 06 and 08 draw."""
from __future__ import annotations

from pathlib import Path

INK, GREY, RED, GREEN, BLUE = "#222222", "#777777", "#d62728", "#2ca02c", "#1f77b4"
# eight hues: one per groupID g = lane / 4 (the row a lane owns), or one per 16-byte chunk of a row
HUES = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def mix(hex_colour: str, white: float) -> str:
    """hex_colour blended with white (white = 0: the colour, 1: white)."""
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * white):02x}" for c in (r, g, b))


def lane_colour(lane: int) -> str:
    """A lane's hue by its groupID, its shade by threadID_in_group (t = lane % 4)."""
    return mix(HUES[lane // 4], [0.35, 0.5, 0.65, 0.8][lane % 4])


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Svg:
    def __init__(self, w: int, h: int, title: str):
        self.w, self.h = w, h
        self.parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
                      f'font-family="sans-serif">', f"<title>{_escape(title)}</title>",
                      f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>']

    def arrowhead(self):
        """Define the arrowhead that `arrow=True` lines and paths end in (once per figure)."""
        self.parts.append('<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="7" refY="4" '
                          'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#222"/></marker></defs>')

    @staticmethod
    def _stroke(stroke, sw, arrow=False, dash=None) -> str:
        return (f'stroke="{stroke}" stroke-width="{sw}"' + (' marker-end="url(#arr)"' if arrow else "")
                + (f' stroke-dasharray="{dash}"' if dash else ""))

    def rect(self, x, y, w, h, fill="none", stroke=INK, sw=1.0, dash=None, rx=0, opacity=None):
        extra = (f' fill-opacity="{opacity}"' if opacity is not None else "") + (f' rx="{rx}"' if rx else "")
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}"{extra} '
                          f'{self._stroke(stroke, sw, dash=dash)}/>')

    def text(self, x, y, s, size=12, anchor="middle", fill=INK, bold=False, italic=False, mono=False):
        extra = ((' font-weight="bold"' if bold else "") + (' font-style="italic"' if italic else "")
                 + (' font-family="monospace"' if mono else ""))
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" '
                          f'fill="{fill}"{extra}>{_escape(s)}</text>')

    def line(self, x1, y1, x2, y2, stroke=INK, sw=1.0, arrow=False, dash=None):
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                          f'{self._stroke(stroke, sw, arrow, dash)}/>')

    def path(self, d: str, stroke=INK, sw=1.0, arrow=False, dash=None):
        """An SVG path from its `d` attribute (curves)."""
        self.parts.append(f'<path d="{d}" fill="none" {self._stroke(stroke, sw, arrow, dash)}/>')

    def polyline(self, points, stroke=INK, sw=1.0, arrow=False, dash=None):
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        self.parts.append(f'<polyline points="{pts}" fill="none" {self._stroke(stroke, sw, arrow, dash)}/>')

    def save(self, path: Path):
        Path(path).write_text("\n".join(self.parts + ["</svg>"]) + "\n")


# ------------------------------------------------------------------------------------------------------
# The m16n8k16 fragments (PTX ISA, "Matrix fragments for mma.m16n8k16", .bf16 operands, fp32 accumulators)

def owner_a(row: int, col: int) -> tuple[int, int]:
    """(lane, bf16 element 0-7) holding A[row][col] of the 16x16 A tile; elements 2r, 2r+1 share 32-bit
    register r: a0,a1 row g | a2,a3 row g+8 | a4,a5 col + 8 | a6,a7 both."""
    g, hi_row = row % 8, row // 8
    t, odd, hi_col = (col % 8) // 2, col % 2, col // 8
    return 4 * g + t, 4 * hi_col + 2 * hi_row + odd


def owner_b(k: int, n: int) -> tuple[int, int]:
    """(lane, element 0-3) holding B[k][n] of the 16x8 B tile (k down, n across)."""
    t, odd, hi = (k % 8) // 2, k % 2, k // 8
    return 4 * n + t, 2 * hi + odd                       # b0,b1 (k = 2t, 2t+1) | b2,b3 (k + 8)


def owner_c(row: int, col: int) -> tuple[int, int]:
    """(lane, element 0-3) holding C[row][col] of the 16x8 accumulator: c0,c1 row g | c2,c3 row g+8."""
    g, hi = row % 8, row // 8
    return 4 * g + col // 2, 2 * hi + col % 2
