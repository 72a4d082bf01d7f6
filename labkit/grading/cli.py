"""The verbs `release` and `grade` for `python -m labkit` (wired there with `register(subparsers)`).

Each verb's handler is set as `func` on its parsed arguments and returns the exit status:

    args = parser.parse_args(); sys.exit(args.func(args))
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import LabkitError
from ..paths import LABS, ROOT
from . import batch
from .nbio import NotebookFormatError
from .release import release_all, student_tree


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "release", help="write the student exercise notebooks from their solution sources",
        description="Write labs/NN-*/exercises.ipynb from labs/NN-*/exercises.solution.ipynb: solution regions "
                    "replaced by TODO stubs, hidden tests removed, outputs cleared.")
    p.add_argument("chapters", nargs="*", metavar="CHAPTER", help="chapters to release, e.g. 03 (default: all)")
    p.add_argument("--labs", default=str(LABS), help="the labs folder (default: the course's labs/)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 and name each student notebook that is out of step")
    p.add_argument("--student-tree", metavar="DIR",
                   help="also write a student-only copy of the course to DIR (a new folder): no solution "
                        "notebooks, no tests, no hidden-shape generators; for a class repository")
    p.set_defaults(func=cmd_release)

    g = subparsers.add_parser(
        "grade", help="grade a folder of submitted exercise notebooks into a CSV",
        description="Grade every exercises notebook under SUBMISSIONS (any depth, any chapters) with the public "
                    "and hidden tests; one CSV row per exercise with its points and the reason for each lost "
                    "point, and a row for every file not graded. Needs a CUDA GPU (exit 2 without one).")
    g.add_argument("submissions", metavar="SUBMISSIONS_DIR", nargs="?", help="folder of submitted .ipynb files")
    g.add_argument("--csv", required=True, help="where to write the grades (CSV)")
    g.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="time limit per submission, everything included (start-up, compile, every kernel), in "
                        "seconds (default 300); each shape also has its own limit")
    g.add_argument("--seed", type=int, default=None,
                   help=f"seed of the hidden shapes and inputs (default: ${batch.SEED_ENV}, else a random one, "
                        "written in the CSV's seed column and printed)")
    g.add_argument("--chapter", help="grade every notebook as this chapter, e.g. 03 (wins over a notebook's own "
                                     "metadata; a disagreement is noted in the row)")
    g.add_argument("--no-speed", action="store_true", help="skip the timing (no speed points are given)")
    g.add_argument("--feedback", metavar="DIR", help="also write each submission's verdicts to a file in DIR")
    g.add_argument("--shard", metavar="I/N", help="grade only shard I of N (0 <= I < N; a stable split by "
                                                  "submission path), e.g. one job of a scheduler's array")
    g.add_argument("--gpus", type=int, metavar="K", help="use at most K of the visible GPUs (default: all)")
    g.add_argument("--merge", nargs="+", metavar="CSV",
                   help="join the CSVs of a batch's shards into --csv instead of grading")
    g.set_defaults(func=cmd_grade)


def cmd_release(args) -> int:
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
    if getattr(args, "student_tree", None):
        try:
            files = student_tree(ROOT, args.student_tree)
        except NotebookFormatError as e:
            print(f"release: {e}", file=sys.stderr)
            return 2
        print(f"wrote the student tree {args.student_tree} ({len(files)} files)")
    return 0


def cmd_grade(args) -> int:
    try:
        if args.merge:
            n = batch.merge_csvs(args.merge, args.csv)
            print(f"merged {len(args.merge)} CSV(s), {n} rows; wrote {args.csv}")
            return 0
        if not args.submissions:
            print("grade: name the SUBMISSIONS_DIR (or --merge CSVs)", file=sys.stderr)
            return 2
        folder = Path(args.submissions)
        if not folder.is_dir():
            print(f"grade: {folder} is not a folder", file=sys.stderr)
            return 2
        shard = batch.parse_shard(args.shard) if args.shard else None
        devices = batch.visible_devices()
        if not devices:
            print("grade: no CUDA GPU is visible on this machine: refusing to grade (every kernel exercise would "
                  "get 0 points). Run `python -m labkit grade` on a GPU machine.", file=sys.stderr)
            return 2
        if args.gpus:
            devices = devices[:max(1, args.gpus)]
        seed = batch.resolve_seed(args.seed)
        rows = batch.grade_batch(folder, args.csv, seed=seed, timeout=args.timeout, speed=not args.no_speed,
                                 chapter=args.chapter, feedback=args.feedback, shard=shard, devices=devices)
    except LabkitError as e:
        print(f"grade: {e}", file=sys.stderr)
        return 2
    subs = {r.submission for r in rows}
    graded = {r.submission for r in rows if r.exercise == "TOTAL"}
    print(f"graded {len(graded)} of {len(subs)} file(s) on {len(devices)} GPU(s), seed {seed} "
          f"(pass --seed {seed} to reproduce); wrote {args.csv}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.grading", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)
