"""A line at the top of each lab page: the GPU and date its outputs were recorded on, from the notebook's
provenance metadata (written by `python -m labkit gpu-check`), or that it has not been recorded yet."""
import html
import json
from pathlib import Path


def banner(provenance: dict | None) -> str:
    if not provenance:
        return ('<p class="labkit-recorded"><em>This lab has not been recorded on a GPU runner yet: the page shows '
                'its code only. Run it on a CUDA GPU to see every output.</em></p>')
    p = provenance
    what = ", ".join(x for x in (f"driver {p.get('driver')}" if p.get("driver") else "",
                                 f"CUDA runtime {p.get('cuda_runtime')}" if p.get("cuda_runtime") else "",
                                 f"CuPy {p.get('cupy')}" if p.get("cupy") else "",
                                 f"PyTorch {p.get('torch')}" if p.get("torch") else "") if x)
    return (f'<p class="labkit-recorded"><em>Outputs recorded on {html.escape(str(p.get("gpu")))} ({html.escape(what)}) '
            f'on {html.escape(str(p.get("recorded_at", ""))[:10])}. Run the notebook to measure your GPU.</em></p>')


def _inject(app, pagename, templatename, context, doctree):
    if not (pagename.startswith("labs/") and pagename.endswith("/lab")):
        return
    source = Path(app.srcdir) / f"{pagename}.ipynb"
    if not source.exists():
        return
    meta = json.loads(source.read_text()).get("metadata", {})
    context["body"] = banner(meta.get("labkit", {}).get("provenance")) + context.get("body", "")


def setup(app):
    app.connect("html-page-context", _inject)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
