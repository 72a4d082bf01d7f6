"""The book builds with -W -n, and reads in a real browser: every page of the table of contents, served on
127.0.0.1 and driven by Playwright through Debian's Chromium (no browser download), loads nothing from the
network, logs no console errors, has no broken images and no unrendered math; its Chinese subtitles are drawn
in the CJK web font shipped with the book (_static/fonts/, tools/make_cjk_font.py), not in a system font."""
import functools
import http.server
import re
import shutil
import threading
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                pages.append(e["file"])
            walk(e.get("sections"))
            walk(e.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return pages


CJK_FAMILY = "Book CJK"   # the @font-face of _static/cjk.css
HAS_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


def page_has_cjk(name: str) -> bool:
    src = ROOT / f"{name}.md"
    return src.exists() and bool(HAS_CJK.search(src.read_text(encoding="utf-8")))


def check_cjk_font(page, cdp) -> list[str]:
    """Problems with the CJK web font on the page now loaded: it must be loaded, and the first CJK <em> of the
    page (the chapter's Chinese subtitle) must be drawn with it, not with a font of the machine."""
    state = page.evaluate("""async (family) => {
        await document.fonts.ready;
        const em = [...document.querySelectorAll('main em, article em')].find(e => /[\u4e00-\u9fff]/.test(e.textContent));
        if (em) em.setAttribute('data-cjk-check', '');
        return {subtitle: em ? em.textContent : null,
                faces: [...document.fonts].filter(f => f.family.replace(/["']/g, '') === family).map(f => f.status),
                check: document.fonts.check('1em "' + family + '"', '阿')};
    }""", CJK_FAMILY)
    problems = []
    if not state["subtitle"]:
        return ["no Chinese subtitle (<em> with CJK text) found"]
    if "loaded" not in state["faces"] or not state["check"]:
        problems.append(f"web font {CJK_FAMILY!r} not loaded (faces {state['faces']}, check {state['check']})")
    doc = cdp.send("DOM.getDocument", {"depth": 0})
    node = cdp.send("DOM.querySelector", {"nodeId": doc["root"]["nodeId"], "selector": "[data-cjk-check]"})
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node["nodeId"]})["fonts"]
    if not any(f["isCustomFont"] and "CJK" in f["familyName"] for f in fonts):
        problems.append(f"subtitle {state['subtitle']!r} drawn with {fonts}, not the book's CJK web font")
    return problems


@pytest.mark.slow
def test_book_builds_without_warnings(built_book):
    for page in toc_pages():
        assert (built_book / f"{page}.html").exists(), f"{page} missing from the build"


@pytest.mark.slow
def test_results_tables_render_as_tables(built_book):
    # Markdown outputs of code cells (the recorded results, the labs' tables) must come out as HTML tables,
    # not as rows of pipes: CommonMark alone has no tables.
    pages = [f"book/{d.name}/index.html" for d in sorted((ROOT / "book").iterdir()) if d.name[:2].isdigit()]
    pages += [f"labs/{d.name}/lab.html" for d in sorted((ROOT / "labs").iterdir()) if (d / "lab.ipynb").exists()]
    for page in pages:
        html = (built_book / page).read_text()
        assert "| op | kernel |" not in html and "|---|" not in html, f"{page}: a Markdown table left unrendered"
    assert "<table" in (built_book / "book/01-roofline/index.html").read_text()
    assert "<td><p>copy_vec128_flat</p></td>" in (built_book / "labs/01-roofline/lab.html").read_text()


@pytest.mark.slow
def test_math_is_served_locally(built_book):
    html = (built_book / "book/01-roofline/index.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in html
    import re
    loaded = re.findall(r'<(?:script|link|img)[^>]*(?:src|href)="([^"]+)"', html)
    remote = [u for u in loaded if u.startswith(("http:", "https:", "//")) and "<link" not in u]
    assert not [u for u in remote if not u.startswith("https://github.com")], remote
    assert (built_book / "_static/mathjax/tex-chtml.js").exists()


@pytest.fixture(scope="module")
def server(built_book):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    handler = functools.partial(Quiet, directory=str(built_book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.mark.slow
@pytest.mark.browser
def test_every_page_renders_in_chromium(server, built_book):
    assert CHROMIUM, "Debian's chromium is not installed (apt-get install chromium); .ci/run installs it"
    from playwright.sync_api import sync_playwright
    shots = ROOT / "_build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        current = {"url": ""}
        page.on("console", lambda m: m.type == "error" and problems.append(f"{current['url']}: console: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"{current['url']}: page error: {e}"))

        def route(r):
            if r.request.url.startswith(server) or r.request.url.startswith("data:"):
                return r.continue_()
            problems.append(f"{current['url']}: requested {r.request.url} from the network")
            return r.abort()
        page.route("**/*", route)
        cdp = page.context.new_cdp_session(page)
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        cjk_pages = []
        for name in toc_pages():
            current["url"] = f"{server}/{name}.html"
            resp = page.goto(current["url"], wait_until="load")
            assert resp and resp.ok, f"{name}: HTTP {resp.status if resp else 'no response'}"
            page.evaluate("async () => { if (window.MathJax && MathJax.startup) await MathJax.startup.promise; }")
            broken = page.evaluate("() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0)"
                                   ".map(i => i.getAttribute('src'))")
            if broken:
                problems.append(f"{name}: broken images {broken}")
            wide = page.evaluate("() => [...document.querySelectorAll('main pre')]"
                                 ".filter(e => e.scrollWidth > e.clientWidth + 1).length")
            if wide:
                problems.append(f"{name}: {wide} code block(s) scroll sideways (_static/code.css wraps them)")
            text = page.evaluate("() => { const m = document.querySelector('main') || document.body;"
                                 " const c = m.cloneNode(true); c.querySelectorAll('pre, code').forEach(e => e.remove());"
                                 " return c.innerText; }")
            for raw in ("\\(", "\\[", "$$"):
                if raw in text:
                    problems.append(f"{name}: unrendered math ({raw!r} left in the text)")
            if page_has_cjk(name):
                cjk_pages.append(name)
                problems += [f"{name}: {p}" for p in check_cjk_font(page, cdp)]
            page.screenshot(path=str(shots / (name.replace("/", "_") + ".png")), full_page=False)
        # a chapter page must have math that MathJax turned into markup
        page.goto(f"{server}/book/01-roofline/index.html", wait_until="load")
        page.evaluate("async () => { await MathJax.startup.promise; }")
        assert page.locator("mjx-container").count() > 0, "MathJax did not render the chapter's math"
        assert "book/04-reductions/index" in cjk_pages and "intro" in cjk_pages, cjk_pages
        browser.close()
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_each_lab_page_says_where_its_outputs_came_from(built_book):
    import sys
    import nbformat
    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    from recorded_banner import banner
    labs = [p for p in toc_pages() if p.startswith("labs/") and p.endswith("/lab")]
    assert labs
    for page in labs:
        nb = nbformat.read(str(ROOT / f"{page}.ipynb"), as_version=4)
        expected = banner(nb.metadata.get("labkit", {}).get("provenance"))
        assert expected in (built_book / f"{page}.html").read_text(), page


CODE_CSS = ROOT / "_static" / "code.css"


def css_declarations(css: str, selector: str) -> dict[str, str]:
    """The declarations of the rule for exactly `selector` in a stylesheet, comments removed."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        if selector in [x.strip() for x in sel.split(",")]:
            return {k.strip(): v.strip() for k, v in (d.split(":", 1) for d in body.split(";") if ":" in d)}
    return {}


def test_code_blocks_wrap_instead_of_scrolling():
    """Kernel sources and notebook cells run to 110-120 columns; the theme's content column holds about 80.
    Code blocks (listings, code cells, text outputs: all `div.highlight pre`) wrap inside the column, with a
    hanging indent on the continuations, instead of scrolling sideways. The rule ships in _static/, which
    Jupyter Book links from every page; where a build at least as new as the stylesheet is present, its pages
    link it and still put code in `div.highlight pre`. (The browser test checks that no block scrolls.)"""
    rule = css_declarations(CODE_CSS.read_text(), "div.highlight pre")
    assert rule, "_static/code.css has no rule for `div.highlight pre`"
    assert rule.get("white-space") == "pre-wrap", rule
    assert rule.get("overflow-wrap") in ("anywhere", "break-word"), rule
    indent = rule.get("text-indent", "").split()
    assert "hanging" in indent and "each-line" in indent, f"no hanging indent on wrapped lines: {rule}"
    html = ROOT / "_build" / "html"
    for page in ("book/01-roofline/index.html", "labs/03-elementwise/lab.html"):
        built = html / page
        if built.exists() and built.stat().st_mtime >= CODE_CSS.stat().st_mtime:
            text = built.read_text()
            assert re.search(r'<link[^>]+href="[./]*_static/code\.css', text), f"{page} does not link code.css"
            assert re.search(r'<div class="highlight[^"]*"><pre>', text), f"{page}: no `div.highlight pre` left"


def test_banner_names_gpu_and_date():
    import sys
    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    from recorded_banner import banner
    text = banner({"gpu": "NVIDIA H200", "driver": "580.159.04", "cupy": "14.2.0", "recorded_at": "2026-11-30T09:00:00"})
    assert "NVIDIA H200" in text and "2026-11-30" in text and "580.159.04" in text
    assert "not been recorded" in banner(None)
