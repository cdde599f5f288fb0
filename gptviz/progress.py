"""Progress of a long step (a load, the logit lens, a patching sweep, generation, a scan, training
an SAE), reported through one callback that every such library function takes as `progress=`.

    def show(p: gptviz.Progress) -> None:
        print(f"{p.what}: {p.done}/{p.total}, {p.fraction:.0%}, about {p.seconds_left:.0f} s left")

    gptviz.logit_lens(model, trace, progress=show)

The library calls `progress(Progress(...))` after each unit of work (never per tensor element).
A caller stops the work by raising `Cancelled` from its callback (the dashboard's Cancel button
does): the exception passes through the library untouched, and nothing half-done is returned.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import GptvizError


class Cancelled(GptvizError):
    """Raised by a progress callback to stop the step it reports on."""


@dataclass(frozen=True)
class Progress:
    """One report: `done` of `total` units of `what` (e.g. "layers", "positions", "tokens")."""

    what: str
    done: int
    total: int
    seconds: float  # since the step started
    stage: str = ""  # what the step is doing now, where it has parts ("reading the tokenizer"); "" if one

    @property
    def counts(self) -> bool:
        """False for a note of a stage begun before any unit can be counted (begin()): total 0."""
        return self.total > 0

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    @property
    def seconds_left(self) -> float | None:
        """A linear estimate from the rate so far; None until one unit is done."""
        if self.done <= 0 or self.total <= 0:
            return None
        return self.seconds * (self.total - self.done) / self.done


ProgressFn = Callable[[Progress], None]


def terminal_bar(desc: str, always: bool = False) -> ProgressFn:
    """A progress callback that draws a tqdm bar on stderr: the CLI's. Only when stderr is a terminal
    (a log or a pipe gets no bar), unless `always` (the commands' --progress)."""
    from tqdm import tqdm

    bar = None

    def show(p: Progress) -> None:
        nonlocal bar
        if not p.counts:  # a stage's note: said on the bar once it is drawn
            if bar is not None:
                bar.set_postfix_str(p.stage)
            return
        if bar is None:
            unit = p.what.rstrip("s") or "step"
            bar = tqdm(total=p.total, unit=unit, desc=desc, file=sys.stderr, disable=False if always else None)
        bar.n = p.done
        bar.refresh()
        if p.done >= p.total:
            bar.close()

    return show


def begin(callback: ProgressFn | None, stage: str) -> None:
    """Report that a stage begins before anything can be counted (reading a tokenizer, the files' headers):
    a Progress with total 0 and `stage` set, so that a bar can be drawn, saying so, before the counted
    work starts. A Cancelled raised by the callback stops the step here too."""
    if callback is not None:
        callback(Progress("", 0, 0, 0.0, stage))


@dataclass
class Reporter:
    """What a library function holds while it works: `tick()` after each unit.

    reporter = Reporter(progress, "positions", total=T)
    for t in range(T):
        ...
        reporter.tick()
    """

    callback: ProgressFn | None
    what: str
    total: int
    done: int = 0
    started: float = field(default_factory=time.perf_counter)

    def tick(self, n: int = 1) -> None:
        self.done += n
        if self.callback is not None:
            self.callback(Progress(self.what, self.done, self.total, time.perf_counter() - self.started))

    def start(self) -> None:
        """Report 0 of total (a bar appears before the first unit is done)."""
        if self.callback is not None:
            self.callback(Progress(self.what, 0, self.total, 0.0))
