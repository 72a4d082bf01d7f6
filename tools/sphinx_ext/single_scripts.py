"""Drop repeated inline scripts from each page.

sphinx-thebe registers its configuration script (`const THEBE_JS_URL = ...`) once per pass over the
documents, and a build that executes notebooks makes two passes: a page would declare the same `const`
twice, which the browser reports as an error. Keeping the first copy of each script fixes that.
"""


def _dedupe(app, pagename, templatename, context, doctree):
    seen, kept = set(), []
    for js in context.get("script_files", []):
        body = str(getattr(js, "attributes", {}).get("body", ""))
        key = ("", body) if body else (str(getattr(js, "filename", js)), "")   # inline: None or '' filename
        if key not in seen:
            seen.add(key)
            kept.append(js)
    context["script_files"] = kept


def setup(app):
    app.connect("html-page-context", _dedupe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
