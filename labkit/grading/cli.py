"""The verbs `release` and `grade` for `python -m labkit` (wired there with `register(subparsers)`).

Each verb's handler is set as `func` on its parsed arguments and returns the exit status:

    args = parser.parse_args(); sys.exit(args.func(args))
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    from ..paths import LABS
    p = subparsers.add_parser(
        "release", help="write the student exercise notebooks from their solution sources",
        description="Write labs/NN-*/exercises.ipynb from labs/NN-*/exercises.solution.ipynb: solution regions "
                    "replaced by TODO stubs, hidden tests removed, outputs cleared.")
    p.add_argument("chapters", nargs="*", metavar="CHAPTER", help="chapters to release, e.g. 03 (default: all)")
    p.add_argument("--labs", default=str(LABS), help="the labs folder (default: the course's labs/)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 and name each student notebook that is out of step")
    p.set_defaults(func=cmd_release)

    g = subparsers.add_parser(
        "grade", help="grade a folder of submitted exercise notebooks into a CSV",
        description="Grade every exercises notebook under SUBMISSIONS (any depth, any chapters) with the public "
                    "and hidden tests; one CSV row per exercise with its points and the reason for each lost "
                    "point. Needs a CUDA GPU for the kernel exercises.")
    g.add_argument("submissions", metavar="SUBMISSIONS_DIR", help="folder of submitted .ipynb files")
    g.add_argument("--csv", required=True, help="where to write the grades (CSV)")
    g.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="time limit per submission, in seconds (default 300); each shape also has its own limit")
    g.add_argument("--solutions-from", default=str(LABS), metavar="LABS",
                   help="folder holding NN-*/exercises.solution.ipynb, for the hidden tests (default: labs/)")
    g.add_argument("--chapter", help="chapter for notebooks without metadata.labkit.exercises, e.g. 03")
    g.add_argument("--no-speed", action="store_true", help="skip the timing (no speed points are given)")
    g.add_argument("--feedback", metavar="DIR", help="also write each submission's verdicts to DIR/<name>.txt")
    g.set_defaults(func=cmd_grade)


def cmd_release(args) -> int:
    from .notebook import NotebookFormatError, release_all
    try:
        done = release_all(Path(args.labs), chapters=args.chapters or None, check=args.check)
    except NotebookFormatError as e:
        print(f"release: {e}", file=sys.stderr)
        return 2
    if not done:
        print(f"release: no exercises.solution.ipynb under {args.labs}", file=sys.stderr)
        return 2
    stale = [p for p, s in done if s]
    for path, was_stale in done:
        if args.check:
            print(f"{'OUT OF STEP' if was_stale else 'ok':12s} {path}")
        else:
            print(f"{'wrote' if was_stale else 'up to date':12s} {path}")
    if args.check and stale:
        print("run `python -m labkit release` to regenerate the student notebooks", file=sys.stderr)
        return 1
    return 0


def cmd_grade(args) -> int:
    from .batch import grade_batch
    folder = Path(args.submissions)
    if not folder.is_dir():
        print(f"grade: {folder} is not a folder", file=sys.stderr)
        return 2
    rows = grade_batch(folder, args.csv, solutions=args.solutions_from, timeout=args.timeout,
                       speed=not args.no_speed, chapter=args.chapter, feedback=args.feedback)
    totals = [r for r in rows if r.exercise in ("TOTAL", "")]
    print(f"graded {len(totals)} submission(s); wrote {args.csv}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.grading", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)
