"""A folder of checkpoints of one training run as a timeline: for one fixed prompt, the loss and
every head's scores at every saved step, so a person can watch a head form.

Three layouts are recognised:

    run/step-000000/ step-000100/ ...   `gptviz train --save-every 100` (native
                                        checkpoints, each card holding that step's train/val loss)
    out/ckpt_100.pt ckpt_200.pt ...     nanoGPT saved at intervals: several .pt/.pth/.ckpt files,
    out/1/ckpt.pt out/2/ckpt.pt ...     or subfolders each holding a checkpoint
    out/checkpoint-500/ ...             Hugging Face Trainer folders (config.json + weights)

One mechanism gives a checkpoint its step: the step it records itself (a native card's `steps`,
nanoGPT's `iter_num` in ckpt.pt, read without its tensors, a Trainer's `global_step` in
trainer_state.json); only where none is recorded, a number in its name (a name with exactly one run
of digits: `step-000100`, `ckpt_100.pt`, `7`; never a date such as `2026-11-23_2250`); and where
neither exists, the name order. Each fallback, and names that disagree with recorded steps, becomes
a note the page shows. Checkpoints are loaded one at a time and dropped once scored: a timeline of
twenty GPT-2-sized steps needs the memory of one. A folder is listed within the bounds of
gptviz.listing, and a run of more than MAX_TIMELINE_STEPS checkpoints is thinned evenly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from . import limits
from .analysis.heads import COLUMNS, head_scores
from .analysis.next_token import per_token_loss
from .capture import trace
from .errors import CheckpointError, GptvizError
from .formats import Bundle, load
from .formats.hf_decoders import is_hf
from .formats.nanogpt import CKPT_NAME, META_NAME, SUFFIXES, load_nanogpt, recorded_iter_num
from .formats.native import is_native
from .formats.safe import read_json, shown_name
from .listing import Entry, list_folder
from .progress import ProgressFn, Reporter

_DIGITS = re.compile(r"\d+")
TRAINER_STATE = "trainer_state.json"  # what Hugging Face's Trainer saves in each checkpoint-N/ folder


class TimelineError(GptvizError, ValueError):
    """A folder that is not a run of checkpoints, or whose checkpoints differ in shape."""


@dataclass(frozen=True)
class RunStep:
    """One saved checkpoint of a run: its step, where it lies, and the losses its card states.
    source: where the step number comes from: "recorded" (the checkpoint's own), "name" (its
    folder or file name), "order" (its place in name order: no step is known)."""

    step: int
    path: Path
    format: str  # "gptviz", "nanogpt" or "hf"
    train_loss: float | None = None
    val_loss: float | None = None
    source: str = "recorded"
    name_step: int | None = None  # the number its name holds, if exactly one


@dataclass(frozen=True)
class RunScan:
    """The checkpoints of a run folder in step order (thinned to MAX_TIMELINE_STEPS), how many the
    folder holds, and the notes a person must see: steps from names or order, names that disagree
    with recorded steps, a listing that stopped early, a thinned run."""

    steps: list[RunStep]
    found: int
    notes: list[str] = field(default_factory=list)


@dataclass
class Timeline:
    """The fixed prompt's loss and every head's scores per step.

    steps: one row per checkpoint: step, train_loss, val_loss (from the cards; NaN where a card has
    none) and prompt_loss (the mean next-token loss on the prompt). heads: one row per (step,
    layer, head) with the columns of gptviz.head_scores. notes: what the page must say about where
    the steps come from (RunScan.notes)."""

    folder: Path
    token_ids: np.ndarray
    steps: pd.DataFrame
    heads: pd.DataFrame
    run: list[RunStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def name_step(path: Path) -> int | None:
    """The step a file or folder name states: its one run of digits (`step-000100`, `ckpt_100.pt`,
    `7`). A name with several (`2026-11-23_2250`, `run2-step100`) states no step: which would it be?"""
    digits = _DIGITS.findall(path.stem if path.suffix in SUFFIXES else path.name)
    return int(digits[0]) if len(digits) == 1 else None


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _count(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _card(path: Path) -> dict:
    try:
        card = read_json(path / "config.json").get("card") or {}
    except CheckpointError:  # the loader will name the problem when the step is loaded
        return {}
    return card if isinstance(card, dict) else {}


def _trainer_step(path: Path) -> int | None:
    try:
        return _count(
            read_json(path / TRAINER_STATE, "trainer state", limits.MAX_LISTING_JSON_BYTES).get("global_step")
        )
    except CheckpointError:
        return None


def _candidates(entries: Sequence[Entry]) -> list[tuple[Path, str]]:
    """(path, format) of every checkpoint among the entries: native folders if there are any (a
    gptviz run), else nanoGPT files and folders and Hugging Face folders."""
    dirs = [e for e in entries if e.is_dir]
    native = [(e.path, "gptviz") for e in dirs if is_native(e.path)]
    if native:
        return native
    found = [(e.path, "nanogpt") for e in entries if e.is_file and os.path.splitext(e.name)[1] in SUFFIXES]
    for e in dirs:
        if (e.path / CKPT_NAME).is_file() and not (e.path / "config.json").exists():
            found.append((e.path, "nanogpt"))
        elif is_hf(e.path) and (e.path / TRAINER_STATE).is_file():
            found.append((e.path, "hf"))
    return found


def _recorded(path: Path, fmt: str) -> tuple[int | None, float | None, float | None]:
    """The step a checkpoint records itself, and the train / val loss its card states."""
    if fmt == "gptviz":
        card = _card(path)
        return _count(card.get("steps")), _number(card.get("train_loss")), _number(card.get("val_loss"))
    if fmt == "nanogpt":
        return recorded_iter_num(path), None, None
    return _trainer_step(path), None, None


def _natural(name: str) -> list:
    """Sort key: digit runs compare as numbers ("iter-9" before "iter-10"), the rest as text."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p]


def _shown(names: list[str], limit: int = 3) -> str:
    """A few file names for a note, printable whatever their bytes."""
    return ", ".join(shown_name(n) for n in names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )


def thin(steps: list[RunStep], limit: int) -> list[RunStep]:
    """At most `limit` of the steps, evenly spaced in step order, the first and the last kept."""
    if len(steps) <= limit:
        return steps
    if limit < 2:
        return steps[-limit:] if limit else []
    keep = sorted({round(i * (len(steps) - 1) / (limit - 1)) for i in range(limit)})
    return [steps[i] for i in keep]


def scan_run(folder: str | Path, max_steps: int | None = None) -> RunScan:
    """The checkpoints of a run folder in step order, with the notes a person must see. Raises
    TimelineError when the folder holds fewer than two (a single checkpoint is no timeline) or two
    share a step."""
    folder = Path(folder)
    try:
        listing = list_folder(folder)
    except (OSError, ValueError) as e:
        reason = "not a folder" if isinstance(e, NotADirectoryError | FileNotFoundError) else "cannot be listed"
        raise TimelineError(f"{folder}: {reason}; a timeline reads a folder of checkpoints of one run") from None
    notes = [listing.note] if listing.note else []
    steps = []
    for path, fmt in _candidates(listing.entries):
        recorded, train, val = _recorded(path, fmt)
        named = name_step(path)
        source = "recorded" if recorded is not None else "name"
        steps.append(RunStep(recorded if recorded is not None else -1, path, fmt, train, val, source, named))
    if len(steps) < 2:
        raise TimelineError(
            f"{folder}: found {len(steps)} checkpoint(s); a timeline needs several of one run: step-NNNNNN/ "
            "folders from `gptviz train --save-every N`, or nanoGPT ckpt files saved at intervals"
            + (f" ({listing.note})" if listing.note else "")
        )
    unknown = [s for s in steps if s.source == "name" and s.name_step is None]
    if unknown:  # neither a recorded step nor a number in the name: only their order is known
        steps.sort(key=lambda s: _natural(s.path.name))
        steps = [
            RunStep(i, s.path, s.format, s.train_loss, s.val_loss, "order", s.name_step) for i, s in enumerate(steps)
        ]
        notes.append(
            f"no step is recorded in {_shown([s.path.name for s in unknown])} and their names state none, so the "
            f"{len(steps)} checkpoints are drawn in name order as 0 … {len(steps) - 1}, not at training steps"
        )
    else:
        steps = [s if s.source == "recorded" else RunStep(s.name_step, *_rest(s)) for s in steps]
        from_names = [s.path.name for s in steps if s.source == "name"]
        if from_names:
            notes.append(
                f"the steps of {len(from_names)} of {len(steps)} checkpoints come from their names "
                f"({_shown(from_names)}): they record none themselves"
            )
    steps.sort(key=lambda s: s.step)
    seen = [s.step for s in steps]
    if len(set(seen)) != len(seen):
        dup = sorted({n for n in seen if seen.count(n) > 1})
        raise TimelineError(f"{folder}: several checkpoints claim step {dup[0]}; keep one run per folder")
    differ = [s for s in steps if s.source == "recorded" and s.name_step is not None and s.name_step != s.step]
    if differ:
        first = f"{shown_name(differ[0].path.name)} holds step {differ[0].step}"
        notes.append(
            f"names and recorded steps disagree for {len(differ)} of {len(steps)} checkpoints ({first}): "
            "drawn at the steps the checkpoints record"
        )
    found = len(steps)
    max_steps = limits.MAX_TIMELINE_STEPS if max_steps is None else max_steps
    steps = thin(steps, max_steps)
    if len(steps) < found:
        notes.append(
            f"the run has {found} checkpoints; the timeline scores {len(steps)} of them, evenly spaced, the first "
            f"and last included (gptviz scores at most {max_steps} per timeline)"
        )
    return RunScan(steps, found, notes)


def _rest(s: RunStep) -> tuple:
    """A RunStep's fields after its step."""
    return s.path, s.format, s.train_loss, s.val_loss, s.source, s.name_step


def run_steps(folder: str | Path) -> list[RunStep]:
    """The checkpoints of a run folder in step order (scan_run without its notes)."""
    return scan_run(folder).steps


def is_run_folder(folder: str | Path) -> bool:
    """Whether the folder holds a gptviz run (step* folders of native checkpoints): cheap, cards only,
    within the listing bounds."""
    try:
        entries = list_folder(folder).entries
    except (OSError, ValueError):
        return False
    return any(e.is_dir and e.name.startswith("step") and is_native(e.path) for e in entries)


def load_run_step(step: RunStep, folder: str | Path | None = None, device: str | torch.device = "cpu") -> Bundle:
    """Load one step's checkpoint. A nanoGPT step without meta.pkl beside it takes the run folder's."""
    if step.format == "nanogpt" and folder is not None:
        beside = (step.path if step.path.is_dir() else step.path.parent) / META_NAME
        shared = Path(folder) / META_NAME
        if not beside.is_file() and shared.is_file():
            try:
                return load_nanogpt(step.path, torch.device(device), meta=shared)
            except GptvizError:
                raise
            except Exception as e:  # an untrusted file: one sentence, never a traceback
                raise CheckpointError(f"{step.path}: could not be loaded ({type(e).__name__})") from None
    return load(step.path, device)


def _shape(bundle: Bundle) -> tuple:
    c = bundle.model.config
    return (c.n_layer, c.n_head, c.n_embd, c.vocab_size)


def timeline(
    folder: str | Path,
    ids: Sequence[int],
    device: str | torch.device = "cpu",
    progress: ProgressFn | None = None,
    scan: RunScan | None = None,
) -> Timeline:
    """Run the prompt `ids` through every checkpoint of the run folder, one checkpoint at a time.

    progress: called with a gptviz.Progress after each step is scored (raise Cancelled to stop). scan: the folder's
    scan_run, when the caller already has it."""
    scan = scan if scan is not None else scan_run(folder)
    run = scan.steps
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size < 2:
        raise TimelineError("the prompt needs at least two tokens: the loss scores each token after the first")
    step_rows, head_frames, shape = [], [], None
    reporter = Reporter(progress, "checkpoints", len(run))
    reporter.start()
    for st in run:
        bundle = load_run_step(st, folder, device)
        if shape is None:
            shape = _shape(bundle)
        elif _shape(bundle) != shape:
            raise TimelineError(
                f"{st.path}: shape (layers, heads, C, vocabulary) {_shape(bundle)} "
                f"differs from the first step's {shape}"
            )
        t = trace(bundle.model, ids, bundle.tokenizer)
        card = bundle.card
        val = st.val_loss if st.val_loss is not None else _number(card.get("best_val_loss"))
        step_rows.append(
            {
                "step": st.step,
                "train_loss": np.nan if st.train_loss is None else st.train_loss,
                "val_loss": np.nan if val is None else val,
                "prompt_loss": float(per_token_loss(t.tensor("logits"), ids)["loss_nats"].mean(skipna=False)),
            }
        )
        scores = head_scores(t)
        scores.insert(0, "step", st.step)
        head_frames.append(scores)
        del t, bundle  # one checkpoint in memory at a time
        reporter.tick()
    steps = pd.DataFrame(step_rows, columns=["step", "train_loss", "val_loss", "prompt_loss"])
    heads = pd.concat(head_frames, ignore_index=True)[["step", *COLUMNS]]
    return Timeline(Path(folder), ids, steps, heads, run, scan.notes)


def first_step_above(tl: Timeline, score: str, threshold: float, layer: int | None = None) -> int | None:
    """The first step at which some head (of `layer`, or any) has `score` >= threshold."""
    h = tl.heads if layer is None else tl.heads[tl.heads["layer"] == layer]
    hit = h[h[score] >= threshold]
    return int(hit["step"].min()) if len(hit) else None
