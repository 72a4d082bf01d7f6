"""`python -m labkit.grading release|grade ...`: the same verbs as `python -m labkit release|grade`."""
import sys

from .cli import main

sys.exit(main())
