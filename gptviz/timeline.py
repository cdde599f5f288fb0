"""A folder of checkpoints of one training run as a timeline: for one fixed prompt, the loss and
every head's scores at every saved step, so a person can watch a head form.

Two layouts are recognised:

    run/step-000000/ step-000100/ ...   `python -m gptviz train --save-every 100` (native
                                        checkpoints, each card holding that step's train/val loss)
    out/ckpt_100.pt ckpt_200.pt ...     nanoGPT saved at intervals: several .pt/.pth/.ckpt files,
    out/iter-100/ckpt.pt ...            or subfolders each holding a checkpoint

A step's number comes from its card (native `steps`, nanoGPT `iter_num`), else from the digits
of its name. Checkpoints are loaded one at a time and dropped once scored: a timeline of twenty
GPT-2-sized steps needs the memory of one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .analysis.heads import COLUMNS, head_scores
from .analysis.next_token import per_token_loss
from .capture import trace
from .errors import CheckpointError, GptvizError
from .formats import Bundle, load
from .formats.nanogpt import CKPT_NAME, META_NAME, SUFFIXES, load_nanogpt
from .formats.native import is_native
from .formats.safe import read_json

_DIGITS = re.compile(r"(\d+)")


class TimelineError(GptvizError, ValueError):
    """A folder that is not a run of checkpoints, or whose checkpoints differ in shape."""


@dataclass(frozen=True)
class RunStep:
    """One saved checkpoint of a run: its step, where it lies, and the losses its card states."""

    step: int
    path: Path
    format: str  # "gptviz" or "nanogpt"
    train_loss: float | None = None
    val_loss: float | None = None


@dataclass
class Timeline:
    """The fixed prompt's loss and every head's scores per step.

    steps: one row per checkpoint: step, train_loss, val_loss (from the cards; NaN where a card has
    none) and prompt_loss (the mean next-token loss on the prompt). heads: one row per (step,
    layer, head) with the columns of gptviz.head_scores."""

    folder: Path
    token_ids: np.ndarray
    steps: pd.DataFrame
    heads: pd.DataFrame
    run: list[RunStep] = field(default_factory=list)


def _name_step(path: Path) -> int | None:
    digits = _DIGITS.findall(path.stem if path.is_file() else path.name)
    return int(digits[-1]) if digits else None


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _native_step(path: Path) -> RunStep:
    card = read_json(path / "config.json").get("card") or {}
    card = card if isinstance(card, dict) else {}
    step = card.get("steps")
    step = step if isinstance(step, int) and not isinstance(step, bool) else _name_step(path)
    if step is None:
        raise TimelineError(f"{path}: no step number in its card or its name")
    return RunStep(step, path, "gptviz", _number(card.get("train_loss")), _number(card.get("val_loss")))


def _nanogpt_candidates(folder: Path) -> list[Path]:
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix in SUFFIXES]
    dirs = [
        p for p in folder.iterdir() if p.is_dir() and (p / CKPT_NAME).is_file() and not (p / "config.json").exists()
    ]
    return files + dirs


def run_steps(folder: str | Path) -> list[RunStep]:
    """The checkpoints of a run folder in step order. Raises TimelineError when the folder holds
    fewer than two (a single checkpoint is no timeline) or two share a step."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TimelineError(f"{folder}: not a folder; a timeline reads a folder of checkpoints of one run")
    native = [p for p in sorted(folder.iterdir()) if p.is_dir() and is_native(p)]
    steps = [_native_step(p) for p in native]
    if not steps:
        for p in _nanogpt_candidates(folder):
            n = _name_step(p)
            if n is None:  # ckpt.pt beside ckpt_100.pt ...: only its own iter_num says where it goes
                n = load_run_step(RunStep(-1, p, "nanogpt"), folder).card.get("iter_num")
                if not isinstance(n, int):
                    continue
            steps.append(RunStep(n, p, "nanogpt"))
    if len(steps) < 2:
        raise TimelineError(
            f"{folder}: found {len(steps)} checkpoint(s); a timeline needs several of one run: step-NNNNNN/ "
            "folders from `python -m gptviz train --save-every N`, or nanoGPT ckpt files saved at intervals"
        )
    steps.sort(key=lambda s: s.step)
    seen = [s.step for s in steps]
    if len(set(seen)) != len(seen):
        dup = sorted({n for n in seen if seen.count(n) > 1})
        raise TimelineError(f"{folder}: several checkpoints claim step {dup[0]}; keep one run per folder")
    return steps


def is_run_folder(folder: str | Path) -> bool:
    """Whether run_steps would find a timeline in this folder (cheap: cards only, no weights)."""
    try:
        return Path(folder).is_dir() and any(
            p.is_dir() and p.name.startswith("step") and is_native(p) for p in Path(folder).iterdir()
        )
    except OSError:
        return False


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
    progress: Callable[[int, int], None] | None = None,
) -> Timeline:
    """Run the prompt `ids` through every checkpoint of the run folder, one checkpoint at a time.

    progress(i, n) is called after each step is scored (for a progress bar)."""
    run = run_steps(folder)
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size < 2:
        raise TimelineError("the prompt needs at least two tokens: the loss scores each token after the first")
    step_rows, head_frames, shape = [], [], None
    for i, st in enumerate(run):
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
                "prompt_loss": float(per_token_loss(t.tensor("logits"), ids)["loss_nats"].mean()),
            }
        )
        scores = head_scores(t)
        scores.insert(0, "step", st.step)
        head_frames.append(scores)
        del t, bundle  # one checkpoint in memory at a time
        if progress is not None:
            progress(i + 1, len(run))
    steps = pd.DataFrame(step_rows, columns=["step", "train_loss", "val_loss", "prompt_loss"])
    heads = pd.concat(head_frames, ignore_index=True)[["step", *COLUMNS]]
    return Timeline(Path(folder), ids, steps, heads, run)


def first_step_above(tl: Timeline, score: str, threshold: float, layer: int | None = None) -> int | None:
    """The first step at which some head (of `layer`, or any) has `score` >= threshold."""
    h = tl.heads if layer is None else tl.heads[tl.heads["layer"] == layer]
    hit = h[h[score] >= threshold]
    return int(hit["step"].min()) if len(hit) else None
