"""labkit: compile, check, time and place CUDA kernels on the roofline of the GPU they run on.

The notebooks of the course import this package. Everything that needs a GPU imports CuPy lazily, so the
package (and the book build, the compile checks and the grader's logic) works on a machine without one.
"""
__version__ = "0.1.0"

from .errors import LabkitError, NoGPUError, KernelCompileError, KernelInputError  # noqa: F401
from .paths import ROOT, KERNELS, LABS, RESULTS  # noqa: F401
