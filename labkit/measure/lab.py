"""What a lab notebook needs in a few calls: this GPU and its ceilings, kernel sources shown, tables and
rooflines of measured records, and interactive controls that leave a static figure behind."""
from __future__ import annotations

from . import ceilings
from .ceilings import datasheet_for
from .compile import course_headers, read_source
from .context import Context
from .device import gpu_info, now_iso, require_gpu
from .records import records_table
from .roofline import figure


class Lab:
    """A lab session on this GPU: its facts, its ceilings (measured once per GPU, cached) and a Context."""

    def __init__(self, chapter: str, quick: bool = True):
        require_gpu(f"the chapter {chapter} lab")
        self.chapter = chapter
        self.gpu = gpu_info()
        self.ceilings = ceilings.measure(verbose=True)
        self.started = now_iso()
        self.ctx = Context(self.ceilings, self.gpu, quick=quick)

    def __repr__(self):
        g, c = self.gpu, self.ceilings
        return (f"GPU {g['name']} (cc {g['compute_capability']}, {g['sm_count']} SMs, L2 {g['l2_bytes'] >> 20} MiB), "
                f"driver {g['driver']}, CUDA runtime {g['cuda_runtime']}, CuPy {g['cupy']}"
                + (f", PyTorch {g['torch']}" if g.get("torch") else "") + f"\nrun at {self.started}\n"
                f"ceilings measured on this GPU: copy {c['copy_gbps']:.0f} GB/s, fp32 FMA {c['fp32_tflops']:.1f} TFLOP/s"
                + (f" (peak at {c['sm_clock_mhz']:.0f} MHz: {c['fp32_peak_tflops']:.1f})" if c.get("fp32_peak_tflops") else "")
                + "".join(f", {w} {c[k]:.0f} TFLOP/s" for k, w in (("mma_tflops", "mma.sync"), ("wgmma_tflops", "wgmma"))
                          if c.get(k))
                + f", bf16 matmul {c['bf16_tflops']:.0f} TFLOP/s")

    def checks(self) -> str:
        """The correctness lines logged so far (deterministic text)."""
        return "\n".join(self.ctx.log)

    def table(self, records):
        from IPython.display import Markdown
        return Markdown(records_table(records))

    def roofline(self, records, title: str | None = None, extra=(), roofs=None):
        """The roofline of `records` with FLOPs (and `extra` computed points, drawn hollow) beside the
        bandwidth chart of the memory-bound ones, against this GPU's ceilings."""
        import matplotlib.pyplot as plt
        ds = datasheet_for(self.gpu["name"])
        figure(records, self.ceilings, ds[1] if ds else None, extra=extra, roofs=roofs,
               title=title or f"chapter {self.chapter} on {self.gpu['name']}")
        plt.show()


def show(path: str, lines: tuple[int, int] | None = None, headers: bool = False, results: bool = False):
    """Display a kernel file from kernels/ with CUDA highlighting (the notebook shows what it runs).
    Its recorded `// Result (...)` lines are left out unless results=True: the reader predicts first, and
    the lab measures. The course headers it includes (kernels/common/) are named below it, or shown too
    with headers=True."""
    from IPython.display import Markdown
    src, name = read_source(path)
    if not results:
        src = without_results(src)
    included = course_headers(src) if path.endswith((".cu", ".cuh")) else []
    if lines:
        src = "\n".join(src.splitlines()[lines[0] - 1:lines[1]])
    lang = "python" if path.endswith(".py") else "cuda"
    text = f"`kernels/{path}`\n\n```{lang}\n{src.rstrip()}\n```"
    if included and headers:
        text += "".join(f"\n\n`kernels/{h}`\n\n```cuda\n{read_source(h)[0].rstrip()}\n```" for h in included)
    elif included:
        text += ("\n\nIt includes " + ", ".join(f"`kernels/{h}`" for h in included)
                 + f" (`lab.show({path!r}, headers=True)` shows them).")
    return Markdown(text)


def without_results(source: str) -> str:
    """A kernel's source without its generated `// Result (...)` line and the result lines under it."""
    out, in_results = [], False
    for line in source.split("\n"):
        if line.startswith("// Result ("):
            in_results = True
            continue
        if in_results and line.startswith("//   "):
            continue
        in_results = False
        out.append(line)
    return "\n".join(out)
