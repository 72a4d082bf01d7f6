"""The instructor's batch grader: a folder of submitted notebooks -> a CSV of points and reasons.

Each submission is read statically (see `extract`); nothing in it is executed in this process. Kernels
run in worker processes (one GPU each; one worker per visible GPU at a time) with per-shape time limits
and one overall limit per submission that covers everything (start-up and compile included). Whatever a
submission holds (odd bytes in its name or cells, a crash, a hang, even a grader bug) becomes rows of the
CSV and the batch goes on.

Hidden tests are drawn at grading time: each kernel task's `hidden_shapes` generator, from the batch's
seed (`--seed`; else $LABKIT_GRADE_SEED; else a random one, written in every row's `seed` column so the
batch can be reproduced). A class can be split into shards (`--shard i/N`: a stable assignment by
submission path) whose CSVs `merge_csvs` joins into what one full run writes.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import os
import queue
import random
import re
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from ..errors import LabkitError
from ..measure.device import has_gpu
from . import tasks as T
from .answers import check
from .extract import Missing, chapter_of, extract_answers, extract_source, is_chapter
from .nbio import NotebookFormatError, read_notebook
from .release import SOLUTION_NAME
from .supervisor import run_task
from .verdict import has_speed_points, max_points, score

CSV_FIELDS = ("submission", "chapter", "exercise", "points", "max_points", "lost", "notes", "seed")
MAX_CELL_CHARS = 4000
MAX_FEEDBACK_CHARS = 1 << 20
SEED_ENV = "LABKIT_GRADE_SEED"


@dataclasses.dataclass
class Row:
    submission: str
    chapter: str
    exercise: str
    points: float
    max_points: int
    lost: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    text: str = ""          # the full verdict, for the feedback files
    seed: int | str = ""

    def csv(self) -> dict:
        num = lambda v: int(v) if float(v).is_integer() else v  # noqa: E731
        return {"submission": safe_cell(self.submission), "chapter": safe_cell(self.chapter),
                "exercise": safe_cell(self.exercise), "points": num(self.points), "max_points": self.max_points,
                "lost": safe_cell(" | ".join(map(str, self.lost))), "notes": safe_cell(" | ".join(map(str, self.notes))),
                "seed": self.seed}


# ------------------------------------------------------------------------------------- safe text

def safe_text(s, limit: int | None = None) -> str:
    """Any str (lone surrogates, control characters) as printable UTF-8 text, escaped where needed."""
    s = str(s).encode("utf-8", "backslashreplace").decode("utf-8")
    out = []
    for ch in s:
        o = ord(ch)
        if o < 32 and ch not in "\n" or 0x7F <= o < 0xA0 or ch in "\u2028\u2029\u202e\u2066\u2067\u2068\u2069\ufeff":
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    s = "".join(out)
    if limit is not None and len(s) > limit:
        s = s[:limit] + "...(cut)"
    return s


def safe_cell(s) -> str:
    """A CSV cell: safe text, one line, bounded, and never read as a spreadsheet formula (a cell starting
    with =, +, -, @, tab or CR gets a leading apostrophe)."""
    s = safe_text(s, MAX_CELL_CHARS).replace("\n", " / ")
    if s[:1] in ("=", "+", "-", "@", "\t", "\r"):
        s = "'" + s
    return s


def feedback_name(submission: str) -> str:
    """A unique, bounded, portable file name for a submission's feedback."""
    digest = hashlib.sha256(str(submission).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(submission).replace("/", "__"))[:80].strip("._") or "submission"
    return f"{stem}-{digest}.txt"


# ------------------------------------------------------------------------------ what gets graded

def resolve_seed(seed=None) -> int:
    """The batch's seed: `seed`, else $LABKIT_GRADE_SEED, else a fresh random one."""
    if seed is None or seed == "":
        seed = os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1, 2 ** 31)
    try:
        return int(seed)
    except (TypeError, ValueError):
        raise LabkitError(f"the seed must be an integer, got {seed!r}") from None


def display_name(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def scan(folder) -> list[tuple[Path, str, str | None]]:
    """Every .ipynb-like file under `folder` (any case of the extension), as (path, display name, reason
    it is not graded or None), sorted by display name. Links are not followed, and refused."""
    root = Path(folder)
    real_root = root.resolve()
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for d in sorted(dirnames):
            p = here / d
            if p.is_symlink():
                out.append((p, display_name(p, root), "refused: a symbolic link to a folder (links are not followed)"))
        for f in sorted(filenames):
            if not f.lower().endswith(".ipynb"):
                continue
            p = here / f
            name = display_name(p, root)
            parts = Path(name).parts
            if p.is_symlink():
                why = "refused: a symbolic link (submit the notebook file itself)"
            elif real_root not in p.resolve().parents:
                why = "refused: the path resolves outside the submissions folder"
            elif ".ipynb_checkpoints" in parts:
                why = "not graded: a Jupyter checkpoint (.ipynb_checkpoints), not a submission"
            elif not f.endswith(".ipynb"):
                why = "not graded: the name does not end in .ipynb (lower case); rename it to grade it"
            elif f.endswith(SOLUTION_NAME) or f.endswith(".solution.ipynb"):
                why = f"not graded: a solution notebook (*.solution.ipynb); students submit {'exercises.ipynb'}"
            else:
                why = None
            out.append((p, name, why))
    return sorted(out, key=lambda e: safe_cell(e[1]))


def find_submissions(folder) -> list[Path]:
    """The notebooks under `folder` that are graded (scan() lists the others too, with the reason)."""
    return [p for p, _, why in scan(folder) if why is None]


def shard_of(name: str, count: int) -> int:
    """The shard (0 .. count-1) a submission belongs to: stable, by its display name."""
    h = hashlib.sha256(safe_cell(name).encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") % count


def parse_shard(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m or not 0 <= int(m[1]) < int(m[2]):
        raise LabkitError(f"--shard takes i/N with 0 <= i < N (e.g. 0/4), got {text!r}")
    return int(m[1]), int(m[2])


# ----------------------------------------------------------------------------------- one submission

def _last(e: BaseException) -> str:
    return traceback.format_exception_only(type(e), e)[-1].strip()


def grade_submission(path: Path, root: Path, *, seed: int, timeout: float, speed: bool = True, runner=None,
                     chapter: str | None = None, device=None) -> list[Row]:
    """One row per exercise of the submission's chapter, then a TOTAL row."""
    runner = runner or run_task
    name = display_name(Path(path), Path(root))
    deadline = time.monotonic() + timeout
    try:
        nb = read_notebook(path)
    except NotebookFormatError as e:
        return [Row(name, "", "", 0, 0, [f"not graded: {e}"], seed=seed)]
    meta = chapter_of(nb)
    notes = []
    if chapter:
        ch = chapter
        if meta is not None and meta != chapter:
            notes.append(f"the notebook's metadata names chapter {meta!r}; graded as chapter {chapter} (--chapter)")
    elif meta is None:
        return [Row(name, "", "", 0, 0, ["not graded: cannot tell which chapter: the notebook has no "
                                         "metadata.labkit.exercises (submit the exercises.ipynb of the course, "
                                         "or pass --chapter)"], seed=seed)]
    else:
        ch = meta
    tasks = T.for_chapter(ch) if is_chapter(ch) else []
    if not tasks:
        return [Row(name, ch, "", 0, 0, [f"not graded: no exercises are defined for chapter {ch!r}"], notes,
                    seed=seed)]
    rows = []
    for task in tasks:
        try:
            rows.append(_grade_task(task, nb, name, ch, seed=seed, deadline=deadline, timeout=timeout,
                                    speed=speed, runner=runner, device=device))
        except Exception as e:  # a grader bug costs this exercise's row, not the submission
            rows.append(Row(name, ch, task.id, 0, max_points(task, hidden=True, speed=speed),
                            [f"grader error (please report it): {_last(e)}"], seed=seed))
    if notes and rows:
        rows[0].notes = notes + rows[0].notes
    total = Row(name, ch, "TOTAL", sum(r.points for r in rows), sum(r.max_points for r in rows), seed=seed,
                notes=list(notes))
    return rows + [total]


def _grade_task(task, nb, name, ch, *, seed, deadline, timeout, speed, runner, device) -> Row:
    if isinstance(task, T.NumericTask):
        try:
            answers = extract_answers(nb, task.id, task.answers_var)
        except Missing as e:
            return Row(name, ch, task.id, 0, task.max_points, [f"-{task.max_points} {e}"], seed=seed)
        v = check(task, answers)
        return Row(name, ch, task.id, v.points, v.max_points, v.lost, v.notes, v.text, seed=seed)
    task_speed = has_speed_points(task, speed)
    hidden = task.hidden_cases(seed)
    most = max_points(task, public=True, hidden=bool(hidden), speed=task_speed)
    try:
        source = extract_source(nb, task.source_var)
    except Missing as e:
        return Row(name, ch, task.id, 0, most, [f"-{most} {e}"], seed=seed)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return Row(name, ch, task.id, 0, most,
                   [f"-{most} the submission's time limit ({timeout:.0f} s) ran out before this exercise"], seed=seed)
    cases = task.cases(None, speed=task_speed) + hidden
    run = runner(task, source, cases, speed=task_speed, total_timeout=remaining, device=device)
    v = score(task, run, speed_requested=task_speed, hidden_without_cases=not hidden)
    return Row(name, ch, task.id, v.points, v.max_points, v.lost, v.notes, v.text, seed=seed)


# ---------------------------------------------------------------------------------------- the batch

def grade_batch(folder, csv_path=None, *, seed=None, timeout: float = 300.0, speed: bool = True, runner=None,
                progress: bool = True, chapter: str | None = None, feedback=None, shard=None,
                devices=None) -> list[Row]:
    """Grade every notebook under `folder` (or the shard (i, N) of them); write the CSV (after every
    submission, so a stopped batch keeps its rows) and per-submission feedback files. devices: the GPUs
    (CUDA_VISIBLE_DEVICES values) to spread the workers over, one at a time each."""
    folder = Path(folder)
    seed = resolve_seed(seed)
    entries = scan(folder)
    if shard is not None:
        i, n = shard
        entries = [e for e in entries if shard_of(e[1], n) == i]
    devices = list(devices) if devices else [None]
    done: dict[int, list[Row]] = {}
    lock = threading.Lock()
    free = queue.Queue()
    for d in devices:
        free.put(d)
    bar = tqdm(total=len(entries), desc="grading", unit="submission", disable=not progress, dynamic_ncols=True)

    def one(k):
        path, name, why = entries[k]
        device = free.get()
        try:
            rows = _one_submission(path, name, why, folder, seed=seed, timeout=timeout, speed=speed,
                                   runner=runner, chapter=chapter, device=device, feedback=feedback)
        finally:
            free.put(device)
        with lock:
            done[k] = rows
            bar.update(1)
            if csv_path is not None:
                write_csv([r for j in sorted(done) for r in done[j]], csv_path)

    if len(devices) == 1:
        for k in range(len(entries)):
            one(k)
    else:
        with ThreadPoolExecutor(max_workers=len(devices)) as pool:
            list(pool.map(one, range(len(entries))))
    bar.close()
    rows = [r for j in sorted(done) for r in done[j]]
    if csv_path is not None:
        write_csv(rows, csv_path)
    return rows


def _one_submission(path, name, why, folder, *, seed, timeout, speed, runner, chapter, device,
                    feedback) -> list[Row]:
    """Every step for one submission, its feedback file included, inside its own error handling."""
    try:
        if why is not None:
            rows = [Row(name, "", "", 0, 0, [why], seed=seed)]
        else:
            rows = grade_submission(path, folder, seed=seed, timeout=timeout, speed=speed, runner=runner,
                                    chapter=chapter, device=device)
    except Exception as e:  # a grader bug on one submission must not stop the batch
        rows = [Row(name, "", "", 0, 0, [f"grader error (please report it): {_last(e)}"], seed=seed)]
    if feedback is not None:
        try:
            write_feedback(rows, feedback)
        except Exception as e:  # noqa: BLE001
            rows[-1].notes.append(f"the feedback file could not be written: {_last(e)}")
    return rows


def write_csv(rows, path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(r.csv())
    os.replace(tmp, path)


def write_feedback(rows, folder) -> Path | None:
    """One text file per submission (a unique, bounded name: see feedback_name), all its verdicts."""
    if not rows:
        return None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    parts = [f"submission: {safe_text(rows[0].submission)}"]
    for r in rows:
        if r.exercise == "TOTAL":
            parts.append(f"TOTAL: {r.points:g}/{r.max_points}")
        else:
            parts.append(r.text or "\n".join([f"{r.exercise or 'submission'}: {r.points:g}/{r.max_points}"]
                                             + [str(x) for x in r.lost]))
    out = folder / feedback_name(rows[0].submission)
    out.write_text(safe_text("\n\n".join(parts), MAX_FEEDBACK_CHARS) + "\n", encoding="utf-8")
    return out


def merge_csvs(paths, out) -> int:
    """Join the CSVs of a batch's shards into `out`, rows in the order one full run writes them. Refuses
    shards of different seeds or a submission in two shards. Returns the number of rows."""
    rows, seeds, owner = [], set(), {}
    for p in paths:
        with Path(p).open(newline="", encoding="utf-8") as f:
            r = csv.DictReader(f)
            if tuple(r.fieldnames or ()) != CSV_FIELDS:
                raise LabkitError(f"{p}: not a grades CSV of this grader (columns {r.fieldnames})")
            for row in r:
                sub = row["submission"]
                if owner.setdefault(sub, p) != p:
                    raise LabkitError(f"submission {sub!r} is in both {owner[sub]} and {p}")
                seeds.add(row["seed"])
                rows.append(row)
    if len(seeds) > 1:
        raise LabkitError(f"the shards were graded with different seeds ({', '.join(sorted(seeds))}): "
                          "grade every shard with the same --seed")
    rows.sort(key=lambda r: r["submission"])            # stable: each submission's rows keep their order
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def visible_devices() -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each GPU this process sees ([] without a GPU)."""
    if not has_gpu():
        return []
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        ids = [x.strip() for x in env.split(",") if x.strip()]
        return ids[:count]
    return [str(i) for i in range(count)]
