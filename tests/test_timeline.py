"""gptviz.timeline: a folder of checkpoints of one run, loaded in step order, scored on one prompt;
`python -m gptviz train --save-every N` writes such a folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from test_nanogpt import write_ckpt

import gptviz
from gptviz.cli import main
from gptviz.timeline import TimelineError, first_step_above, is_run_folder, run_steps, timeline

TINY = "--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --eval-interval 5 --eval-batches 2"
TINY += " --warmup-steps 2 --threads 1 --lr 3e-3"


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("run")
    corpus = tmp / "text.txt"
    corpus.write_text("".join(f"abcab{i % 7}cab\n" for i in range(300)))
    out = tmp / "run"
    argv = ["train", "--corpus", str(corpus), "--out", str(out), "--max-steps", "20", "--save-every", "10"]
    assert main(argv + TINY.split()) == 0
    return out


def test_save_every_keeps_one_checkpoint_per_interval_with_its_losses(saved_run):
    snaps = sorted(p.name for p in saved_run.iterdir() if p.is_dir())
    assert snaps == ["step-000000", "step-000010", "step-000020"]
    for name in snaps:
        card = json.loads((saved_run / name / "config.json").read_text())["card"]
        assert card["steps"] == int(name[-6:])
        assert 0 < card["train_loss"] < 10 and 0 < card["val_loss"] < 10
        assert "--save-every" in card["command"]
    first = json.loads((saved_run / "step-000000" / "config.json").read_text())["card"]
    last = json.loads((saved_run / "step-000020" / "config.json").read_text())["card"]
    assert last["train_loss"] < first["train_loss"]  # 20 steps on a repetitive text do learn
    assert gptviz.load(saved_run / "step-000010").model.config.n_layer == 1


def test_the_timeline_lists_the_steps_in_order_with_their_losses(saved_run):
    assert is_run_folder(saved_run)
    steps = run_steps(saved_run)
    assert [s.step for s in steps] == [0, 10, 20]
    bundle = gptviz.load(steps[0].path)
    ids = bundle.tokenizer.encode("abcab3cab\nab")
    tl = timeline(saved_run, ids)
    assert list(tl.steps["step"]) == [0, 10, 20]
    for s, row in zip(steps, tl.steps.itertuples()):
        card = json.loads((s.path / "config.json").read_text())["card"]
        assert row.train_loss == card["train_loss"] and row.val_loss == card["val_loss"]
    # the prompt's loss at each step is the mean next-token loss of that checkpoint, computed here again
    for s, got in zip(steps, tl.steps["prompt_loss"]):
        model = gptviz.load(s.path).model
        logits = model(torch.tensor([ids]))[0]
        ref = torch.nn.functional.cross_entropy(logits[:-1].double(), torch.tensor(ids[1:])).item()
        assert got == pytest.approx(ref, abs=1e-5)
    assert len(tl.heads) == 3 * 1 * 2 and list(tl.heads["step"].unique()) == [0, 10, 20]
    again = gptviz.head_scores(gptviz.trace(gptviz.load(steps[2].path).model, ids))
    last = tl.heads[tl.heads["step"] == 20].reset_index(drop=True)
    assert np.allclose(last["previous_token"], again["previous_token"])
    # the first step at which some head reaches a score, worked out from the table by hand
    best = tl.heads.groupby("step")["self"].max()
    threshold = float(best.iloc[1:].max())
    want = int(best[best >= threshold].index.min())
    assert first_step_above(tl, "self", threshold) == want
    assert first_step_above(tl, "self", 1.01) is None
    assert first_step_above(tl, "self", 0.0, layer=0) == 0


def test_a_nanogpt_out_folder_saved_at_intervals(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for n, loss in [(2000, 1.9), (500, 2.5), (1000, 2.2)]:  # written out of order on purpose
        write_ckpt(tmp_path / f"tmp{n}", meta=False, iter_num=n, best_val_loss=torch.tensor(loss))
        shutil.move(tmp_path / f"tmp{n}" / "ckpt.pt", out / f"ckpt_{n}.pt")
    write_ckpt(tmp_path / "meta_src")
    shutil.move(tmp_path / "meta_src" / "meta.pkl", out / "meta.pkl")
    steps = run_steps(out)
    assert [s.step for s in steps] == [500, 1000, 2000] and {s.format for s in steps} == {"nanogpt"}
    tl = timeline(out, [1, 2, 3, 4, 5])
    assert list(tl.steps["step"]) == [500, 1000, 2000]
    assert list(tl.steps["val_loss"]) == pytest.approx([2.5, 2.2, 1.9], abs=1e-4)
    assert tl.steps["train_loss"].isna().all()  # nanoGPT keeps no train loss in its checkpoint


def test_nanogpt_subfolders_each_holding_ckpt_pt(tmp_path):
    for n in (300, 100, 200):
        write_ckpt(tmp_path / "out" / f"iter-{n}", iter_num=n)
    assert [s.step for s in run_steps(tmp_path / "out")] == [100, 200, 300]


def test_folders_that_are_no_timeline_say_so(tmp_path, saved_run):
    with pytest.raises(TimelineError, match="not a folder"):
        run_steps(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TimelineError, match="found 0 checkpoint"):
        run_steps(tmp_path / "empty")
    one = tmp_path / "one"
    shutil.copytree(saved_run / "step-000010", one / "step-000010")
    with pytest.raises(TimelineError, match="found 1 checkpoint"):
        run_steps(one)
    mixed = tmp_path / "mixed"
    shutil.copytree(saved_run / "step-000000", mixed / "step-000000")
    torch.manual_seed(0)
    gptviz.save(
        gptviz.GPT(gptviz.GPTConfig(vocab_size=8, block_size=16, n_layer=2, n_head=2, n_embd=16)),
        mixed / "step-000050",
        card={"steps": 50},
    )
    with pytest.raises(TimelineError, match="differs from the first step"):
        timeline(mixed, [1, 2, 3])
    with pytest.raises(TimelineError, match="two tokens"):
        timeline(saved_run, [1])
    assert not is_run_folder(tmp_path / "empty") and not is_run_folder(tmp_path / "missing")


SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "induction-2l"
SHIPPED_PROMPT = "k3x9qbz07mwe5uyhdq8tr" * 2  # 21 random symbols said twice
JUMP = (2500, 2750)  # the saved steps either side of the loss drop (checkpoints/README.md)


def test_the_shipped_run_forms_an_induction_head_as_its_loss_drops():
    steps = run_steps(SHIPPED)
    assert [s.step for s in steps] == [0, 1000, 2000, 2250, 2500, 2750, 3000, 3500, 3750, 4000, 5000]
    ids = gptviz.load(steps[0].path).tokenizer.encode(SHIPPED_PROMPT)
    tl = timeline(SHIPPED, ids)
    ind = tl.heads[tl.heads["layer"] == 1].groupby("step")["induction"].max()
    val = tl.steps.set_index("step")["val_loss"]
    before, after = JUMP
    assert ind[ind.index <= before].max() < 0.1  # no layer-1 head does it before the jump
    assert ind[after] - ind[before] > 0.15  # it jumps across the same interval as the loss
    assert val[before] - val[after] > 0.35
    per_step = -val.diff() / val.index.to_series().diff()  # loss lost per step since the previous snapshot
    assert per_step.idxmax() == after  # the sharpest loss drop of the run
    assert (ind[ind.index >= 3750] > 0.4).all()  # and one head stays above 0.4 from step 3750 on
    assert first_step_above(tl, "induction", 0.4, layer=1) == 3750
    assert first_step_above(tl, "induction", 0.4, layer=0) is None  # layer 0 has none: it is layer 1's


def test_a_nan_token_loss_makes_the_step_prompt_loss_nan(saved_run, monkeypatch):
    """A NaN the checkpoint computes at one position stays NaN on the timeline: an average that skips
    it would draw the broken step as a good one. (A real NaN weight spreads to every position through
    attention's 0 × NaN, so one position is made NaN here, after the real per-token loss.)"""
    import gptviz.timeline as tl_module

    real = tl_module.per_token_loss

    def one_nan(logits, ids):
        df = real(logits, ids)
        df.loc[df.index[1], "loss_nats"] = float("nan")
        return df

    monkeypatch.setattr(tl_module, "per_token_loss", one_nan)
    ids = gptviz.load(run_steps(saved_run)[0].path).tokenizer.encode("abcab3cab\nab")
    assert timeline(saved_run, ids).steps["prompt_loss"].isna().all()
