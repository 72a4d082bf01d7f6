"""Errors a learner sees. Each renders as a short message in Jupyter, not a traceback through labkit."""


class LabkitError(Exception):
    """Base class. In IPython, `_render_traceback_` replaces the traceback with the message alone."""

    def _render_traceback_(self):
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {line}" if i == 0 else line
                for i, line in enumerate(str(self).splitlines())]


class NoGPUError(LabkitError):
    """Raised where a CUDA GPU is needed and none is visible."""

    def __init__(self, what: str = "this step"):
        super().__init__(
            f"{what} needs a CUDA GPU, and none is visible to CuPy on this machine.\n"
            "Without a GPU you can still read the book, compile-check kernels "
            "(labkit.compile_check / `python -m labkit compile-check`) and look at the recorded results.\n"
            "On Colab: Runtime > Change runtime type > GPU, then run the first cell again.")


class KernelCompileError(LabkitError):
    """The CUDA source did not compile; the message points at the learner's line."""


class KernelInputError(LabkitError, ValueError):
    """A kernel wrapper got an array of the wrong dtype, shape, layout or alignment."""


class KernelFault(LabkitError):
    """A kernel crashed (illegal address, misaligned access, ...) or ran past its time limit."""


class CheckFailed(LabkitError, AssertionError):
    """A kernel gave a wrong answer in a correctness check (the message names the shape and element)."""
