"""The `kernel-listing` directive: a kernel file from kernels/, shown without its generated result lines.

Every kernel file opens with its idea, its prediction and the result recorded on the GPU runner. A page
shows the listing where the reader is asked to predict, so the listing leaves the result lines out
(labkit.measure.lab.without_results, the same filter the labs' `lab.show` uses); the page quotes the
measured result after the prediction, from the results file.

    ```{kernel-listing} 03-elementwise/02_add_vec128.cu
    ```
"""
from docutils import nodes
from docutils.parsers.rst import Directive, directives


class KernelListing(Directive):
    required_arguments = 1
    optional_arguments = 0
    option_spec = {"language": directives.unchanged, "caption": directives.unchanged}
    has_content = False

    def run(self):
        from labkit.measure.lab import without_results
        from labkit.paths import KERNELS
        rel = self.arguments[0]
        path = KERNELS / rel
        env = self.state.document.settings.env
        if not path.is_file():
            raise self.error(f"kernel-listing: no file kernels/{rel}")
        env.note_dependency(str(path))
        text = without_results(path.read_text())
        block = nodes.literal_block(text, text, language=self.options.get("language") or
                                    ("python" if rel.endswith(".py") else "cuda"))
        block["source"] = str(path)
        caption = self.options.get("caption", f"kernels/{rel}")
        container = nodes.container("", literal_block=True, classes=["literal-block-wrapper"])
        container += nodes.caption(caption, "", nodes.Text(caption))
        container += block
        return [container]


def setup(app):
    app.add_directive("kernel-listing", KernelListing)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
