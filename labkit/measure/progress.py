"""Progress bars for sweeps: tqdm's bar while a person watches, and one plain line with the final count
when a notebook is executed to be recorded (LABKIT_PLAIN_PROGRESS=1, which the GPU runner sets), so that the
rendered book shows a finished sweep instead of a widget frozen at "0% 0/N"."""
from __future__ import annotations

import os


def tqdm(iterable=None, *, desc: str = "", total: int | None = None, disable: bool = False, **kw):
    """tqdm.auto.tqdm, or under the runner a bar that prints "<desc>: n/total" once, when it closes."""
    if disable or not os.environ.get("LABKIT_PLAIN_PROGRESS"):
        from tqdm.auto import tqdm as bar
        return bar(iterable, desc=desc, total=total, disable=disable, **kw)
    return _Plain(iterable, desc, total)


class _Plain:
    def __init__(self, iterable, desc, total):
        self.iterable, self.desc, self.n, self.closed = iterable, desc, 0, False
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)

    def __iter__(self):
        for x in self.iterable:
            yield x
            self.n += 1
        self.close()

    def update(self, k: int = 1):
        self.n += k

    def set_postfix_str(self, *a, **kw):
        pass

    def close(self):
        if not self.closed:
            self.closed = True
            print(f"{self.desc}: {self.n}/{self.total if self.total is not None else self.n} done", flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
