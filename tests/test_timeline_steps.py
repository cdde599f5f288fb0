"""Where a timeline's steps come from, and what a folder listing costs.

Steps: the step a checkpoint records itself (nanoGPT's iter_num in real ckpt.pt files, a gptviz card,
a Hugging Face Trainer's trainer_state.json) comes first; a name only where none is recorded, and
never a date; else the name order; each fallback and each disagreement is a note. Listings: bounded
in entries and time, saying so when they stop; a run folder's rerun stamp is one stat; a long run is
thinned evenly; iter_num is read through the safe torch.load without running a pickle's code."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from test_nanogpt import write_ckpt

import gptviz
from gptviz import limits
from gptviz.dashboard.panels import comparisons
from gptviz.formats.nanogpt import recorded_iter_num
from gptviz.listing import list_folder
from gptviz.timeline import TimelineError, name_step, run_steps, scan_run, thin, timeline

IDS = [1, 2, 3, 4, 5, 6]


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> bytes:
    """One real nanoGPT ckpt.pt (train.py's dict), as bytes: copies with another iter_num are cheap."""
    tmp = tmp_path_factory.mktemp("snap")
    write_ckpt(tmp, meta=True)
    return (tmp / "ckpt.pt").read_bytes(), (tmp / "meta.pkl").read_bytes()


def save_snapshot(snapshot, path: Path, iter_num: int | None, meta: bool = True) -> None:
    """ckpt.pt at path (a folder) or path itself (a .pt file), with iter_num set, or removed (None)."""
    file = path if path.suffix == ".pt" else path / "ckpt.pt"
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_suffix(".tmp")
    tmp.write_bytes(snapshot[0])
    ckpt = torch.load(tmp, weights_only=True)
    tmp.unlink()
    if iter_num is None:
        del ckpt["iter_num"]
    else:
        ckpt["iter_num"] = iter_num
    torch.save(ckpt, file)
    if meta:
        (file.parent / "meta.pkl").write_bytes(snapshot[1])


def test_folders_named_1_to_10_are_drawn_at_the_iter_num_they_hold(tmp_path, snapshot):
    for i in range(1, 11):  # nanoGPT snapshots kept per evaluation, folders numbered by hand
        save_snapshot(snapshot, tmp_path / "run" / str(i), 250 * i)
    scan = scan_run(tmp_path / "run")
    assert [s.step for s in scan.steps] == [250 * i for i in range(1, 11)]
    assert [s.path.name for s in scan.steps] == [str(i) for i in range(1, 11)]
    assert {s.source for s in scan.steps} == {"recorded"}
    (note,) = scan.notes
    assert "names and recorded steps disagree for 10 of 10 checkpoints" in note and "holds step" in note
    tl = timeline(tmp_path / "run", IDS)
    assert list(tl.steps["step"]) == [250 * i for i in range(1, 11)] and tl.notes == scan.notes
    assert sorted(tl.heads["step"].unique()) == [250 * i for i in range(1, 11)]


def test_dated_folders_are_never_read_as_steps(tmp_path, snapshot):
    dated = ["2026-11-23_2250", "2026-11-23_2251", "2026-11-24_0003"]
    assert [name_step(Path(d)) for d in dated] == [None, None, None]
    for n, d in zip((1000, 2000, 3000), dated):
        save_snapshot(snapshot, tmp_path / "dated" / d, n)
    scan = scan_run(tmp_path / "dated")
    assert [s.step for s in scan.steps] == [1000, 2000, 3000] and scan.notes == []
    # with no step recorded either: the name order, 0 … n-1, and the page is told so
    for d in dated:
        save_snapshot(snapshot, tmp_path / "bare" / d, None)
    scan = scan_run(tmp_path / "bare")
    assert [(s.step, s.path.name, s.source) for s in scan.steps] == [(i, d, "order") for i, d in enumerate(dated)]
    assert "drawn in name order as 0 … 2, not at training steps" in scan.notes[0]
    assert list(timeline(tmp_path / "bare", IDS).steps["step"]) == [0, 1, 2]


def test_names_are_the_fallback_and_say_so(tmp_path, snapshot):
    for n in (300, 100, 200):
        save_snapshot(snapshot, tmp_path / "out" / f"ckpt_{n}.pt", None, meta=False)
    save_snapshot(snapshot, tmp_path / "out" / "ckpt_400.pt", 400, meta=True)  # one records its step
    scan = scan_run(tmp_path / "out")
    assert [(s.step, s.source) for s in scan.steps] == [(100, "name"), (200, "name"), (300, "name"), (400, "recorded")]
    (note,) = scan.notes
    assert "the steps of 3 of 4 checkpoints come from their names" in note and "ckpt_100.pt" in note
    assert [name_step(Path(n)) for n in ("step-000100", "iter-7", "42", "ckpt_9.pt", "run2-step5", "out")] == [
        100,
        7,
        42,
        9,
        None,
        None,
    ]


def test_gptviz_cards_and_trainer_state_record_their_steps(tmp_path):
    tok = gptviz.CharTokenizer(list("abcdefghij "))
    for name, steps in (("a", 30), ("b", 10), ("c", 20)):  # names that state nothing: the cards order them
        torch.manual_seed(steps)
        model = gptviz.GPT(gptviz.GPTConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=8))
        gptviz.save(model, tmp_path / "native" / f"step-{name}", tok, card={"steps": steps})
    assert [s.step for s in run_steps(tmp_path / "native")] == [10, 20, 30]
    from hf_helpers import hf_random

    for folder, step in (("checkpoint-1", 500), ("checkpoint-2", 1000)):  # names disagree with the state
        hf_random(seed=step, vocab_size=11).save_pretrained(tmp_path / "hf" / folder)
        (tmp_path / "hf" / folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 1.0}))
    scan = scan_run(tmp_path / "hf")
    assert [(s.step, s.format, s.source) for s in scan.steps] == [(500, "hf", "recorded"), (1000, "hf", "recorded")]
    assert "disagree" in scan.notes[0]
    tl = timeline(tmp_path / "hf", IDS)
    assert list(tl.steps["step"]) == [500, 1000]


def test_iter_num_is_read_without_running_a_pickle(tmp_path, snapshot):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):  # what an unsafe unpickler would call: Path.touch(marker)
            return (Path.touch, (marker,))

    for n in (1, 2):
        save_snapshot(snapshot, tmp_path / "run" / f"ckpt_{n}.pt", n * 100, meta=False)
    torch.save({"model": {}, "model_args": {}, "iter_num": 999, "x": Payload()}, tmp_path / "run" / "ckpt_3.pt")
    assert recorded_iter_num(tmp_path / "run" / "ckpt_1.pt") == 100
    assert recorded_iter_num(tmp_path / "run" / "ckpt_3.pt") is None  # refused: it names a callable
    scan = scan_run(tmp_path / "run")
    assert [(s.step, s.source) for s in scan.steps] == [(3, "name"), (100, "recorded"), (200, "recorded")]
    assert not marker.exists()
    with pytest.raises(gptviz.CheckpointError, match="could run code"):
        timeline(tmp_path / "run", IDS)


def test_a_listing_stops_at_its_bounds_and_says_so(tmp_path, monkeypatch, snapshot):
    for i in range(40):
        (tmp_path / f"log-{i:03d}.txt").touch()
    full = list_folder(tmp_path)
    assert full.complete and len(full.entries) == 40 and full.note == ""
    part = list_folder(tmp_path, max_entries=25)
    assert not part.complete and len(part.entries) == 25
    assert "only the first 25 entries were read (it stopped at 25 entries" in part.note
    late = list_folder(tmp_path, max_seconds=0)
    assert not late.complete and "it stopped at 0 s" in late.note
    # a run folder among many files: the scan carries the listing's note, and so does its error
    for n in (1, 2, 3):
        save_snapshot(snapshot, tmp_path / f"iter-{n * 10}", n * 10, meta=False)
    monkeypatch.setattr(limits, "MAX_LISTING_ENTRIES", 42)  # 43 entries: one is left unread
    scan_or_error = None
    try:
        scan_or_error = scan_run(tmp_path)
    except TimelineError as e:
        scan_or_error = str(e)
    text = scan_or_error if isinstance(scan_or_error, str) else " ".join(scan_or_error.notes)
    assert "only the first 42 entries were read" in text
    monkeypatch.setattr(limits, "MAX_LISTING_ENTRIES", 1000)
    assert scan_run(tmp_path).notes == []


def test_a_long_run_is_thinned_evenly_and_says_so(tmp_path, monkeypatch, snapshot):
    for n in range(9):
        save_snapshot(snapshot, tmp_path / "run" / f"ckpt_{n * 50}.pt", n * 50, meta=False)
    monkeypatch.setattr(limits, "MAX_TIMELINE_STEPS", 5)
    scan = scan_run(tmp_path / "run")
    assert scan.found == 9 and [s.step for s in scan.steps] == [0, 100, 200, 300, 400]
    (note,) = scan.notes
    assert "the run has 9 checkpoints; the timeline scores 5 of them, evenly spaced" in note
    kept = thin(list(range(500)), 100)  # 500 snapshots, at most 100 scored: every 5th or so
    assert len(kept) == 100 and kept[:3] == [0, 5, 10] and kept[-1] == 499


def test_the_rerun_stamp_of_a_run_folder_never_lists_it(tmp_path, monkeypatch, snapshot):
    """A rerun stats the folder once: 100,000 log files beside the checkpoints cost nothing. Adding a
    step changes the stamp; rewriting a step's file changes its steps_version."""
    for n in (1, 2):
        save_snapshot(snapshot, tmp_path / f"iter-{n}", n, meta=False)
    before = comparisons.folder_stamp(tmp_path)
    steps = run_steps(tmp_path)
    version = comparisons.steps_version(steps)

    def refuse(*args, **kwargs):
        raise AssertionError("the stamp listed the folder")

    with monkeypatch.context() as m:
        m.setattr(os, "scandir", refuse)
        m.setattr(os, "listdir", refuse)
        m.setattr(Path, "iterdir", refuse)
        assert comparisons.folder_stamp(tmp_path) == before
        assert comparisons.steps_version(steps) == version
    save_snapshot(snapshot, tmp_path / "iter-3", 3, meta=False)
    assert comparisons.folder_stamp(tmp_path) != before
    os.utime(steps[0].path / "ckpt.pt", ns=(1, 1))
    assert comparisons.steps_version(steps) != version
    shutil.rmtree(tmp_path / "iter-3")
