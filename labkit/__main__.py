"""`python -m labkit VERB`: the course's command line. `python -m labkit --help` lists the verbs."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .runner.gpu_check import CELL_TIMEOUT


def _info(args):
    from .measure.compile import include_dirs
    from .measure.device import gpu_info, has_gpu
    if has_gpu():
        for k, v in gpu_info().items():
            print(f"{k:18s} {v}")
    else:
        print("No CUDA GPU visible. Reading, compile checks (compile-check) and recorded results still work.")
    print(f"{'cuda headers':18s} {', '.join(include_dirs()) or 'not found (pip install nvidia-cuda-runtime)'}")
    return 0


def _compile_check(args):
    """Kernel files compile for their targets with no spills. A header (.cuh) is compiled through the
    kernel files that include it (many need their includer's tile macros, or sm_90a); one that no kernel
    includes yet compiles as a translation unit of its own."""
    from .errors import KernelCompileError
    from .measure.compile import compile_check, course_headers, read_source, target_archs
    from .paths import KERNELS

    def rel(f) -> str:                 # "common/x.cuh" for a path given from here or from kernels/
        p = Path(f) if Path(f).exists() else KERNELS / f
        return p.resolve().relative_to(KERNELS.resolve()).as_posix()

    kernels = sorted(KERNELS.rglob("*.cu"))
    includers: dict[str, list] = {}
    for k in kernels:
        for h in course_headers(read_source(str(k))[0]):
            includers.setdefault(h, []).append(k)
    asked = [f for f in args.files if f.endswith((".cu", ".cuh"))]
    if asked:
        files = [x for f in asked for x in (includers.get(rel(f), [f]) if f.endswith(".cuh") else [f])]
    else:
        files = kernels + [h for h in sorted(KERNELS.rglob("*.cuh")) if rel(h) not in includers]
    bad = 0
    for f in dict.fromkeys(str(x) for x in files):
        src, _ = read_source(f)
        if f.endswith(".cuh"):          # a translation unit that includes the header, for its target
            src = f'#include "{rel(f)}"\n' + ("// requires: sm_90a\n" if "requires: sm_90a" in src else "")
        for arch in ([args.arch] if args.arch else target_archs(src)):
            try:
                rep = compile_check(src if f.endswith(".cuh") else f, arch)   # a file: errors name it
            except KernelCompileError as e:
                print(f"FAIL {f} [{arch}]\n{e}")
                bad += 1
                continue
            spills = [fn.name for fn in rep.functions.values() if fn.spills]
            print(f"{'SPILL' if spills else 'ok   '} {f} [{arch}]")
            if rep.functions:
                print("      " + str(rep).replace("\n", "\n      "))
            bad += bool(spills)
    return 1 if bad else 0


def _ceilings(args):
    from .measure import ceilings
    c = ceilings.measure(refresh=args.refresh)
    print(ceilings.table(c))
    return 0


def _bench(args):
    from .runner.gpu_check import run_bench
    ok, msg = run_bench(args.chapter or None, quick=args.quick, path=args.json or None, save=args.json is not None)
    print(msg)
    return 0 if ok else 1


def _gpu_check(args):
    from .runner.gpu_check import PHASES, gpu_check
    return gpu_check(tuple(args.only.split(",")) if args.only else PHASES, args.chapter or None, args.cell_timeout)


def _profile(args):
    from .runner.gpu_check import run_profile
    ok, msg = run_profile(args.chapter or None)
    print(msg)
    return 0 if ok else 1


def _stale(args):
    from .paths import RESULTS
    from .runner.provenance import problems, results_problems
    from .runner.gpu_check import notebooks
    out = [p for nb in notebooks() for p in problems(nb)]
    out += [p for f in sorted(RESULTS.glob("*.json")) for p in results_problems(f)]
    print("\n".join(out) or "all recorded notebooks and results are current")
    return 1 if out else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit", description="The command line of the GPU Kernel Engineering course.")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    s = sub.add_parser("info", help="this machine: GPU, driver, versions, CUDA headers")
    s.set_defaults(fn=_info)
    s = sub.add_parser("compile-check", help="compile kernels with NVRTC for sm_80/sm_90(a), no GPU needed; "
                                             "print ptxas' report (registers, shared memory, spills)")
    s.add_argument("files", nargs="*", help=".cu files (default: every file under kernels/)")
    s.add_argument("--arch", help="one architecture, e.g. sm_90a (default: what each file targets)")
    s.set_defaults(fn=_compile_check)
    s = sub.add_parser("ceilings", help="measure this GPU's copy bandwidth, fp32 and bf16 rates (cached per GPU)")
    s.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    s.set_defaults(fn=_ceilings)
    s = sub.add_parser("bench", help="each chapter's kernels against their baselines, ceilings measured in the same run")
    s.add_argument("--chapter", action="append", help="chapter number such as 03 (repeatable; default: all)")
    s.add_argument("--json", nargs="?", const="", default=None,
                   help="write records to FILE (default with no FILE: labs/results/<gpu>.json)")
    s.add_argument("--quick", action="store_true", help="smaller shapes (a smoke run)")
    s.set_defaults(fn=_bench)
    s = sub.add_parser("gpu-check", help="on a GPU: GPU tests, benchmarks, record every notebook, re-run under nbval")
    s.add_argument("--only", help="comma-separated phases: tests,bench,profile,execute,nbval")
    s.add_argument("--chapter", action="append", help="limit tests, bench, profile and notebooks to these chapters")
    s.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT,
                   help=f"seconds a notebook cell may run when recording and under nbval (default {CELL_TIMEOUT})")
    s.set_defaults(fn=_gpu_check)
    s = sub.add_parser("profile", help="Nsight Compute readings of each chapter's kernels into the results file")
    s.add_argument("--chapter", action="append", help="chapter number such as 03 (repeatable; default: all)")
    s.set_defaults(fn=_profile)
    s = sub.add_parser("stale", help="list notebooks and results whose code or kernels changed since they were recorded")
    s.set_defaults(fn=_stale)
    try:
        from .grading.cli import register
        register(sub)
    except ImportError:
        pass
    args = p.parse_args(argv)
    from .errors import LabkitError
    try:
        return (getattr(args, "fn", None) or args.func)(args)
    except LabkitError as e:          # a learner's or operator's mistake: the message, not a traceback
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
