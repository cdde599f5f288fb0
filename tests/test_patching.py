"""patching_sweep: equal, cell by cell, to the naive loop of one full patched run per cell, with
results worked out by hand where there is one, and bad inputs refused with a clear message."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_model

import gptviz
from gptviz.analysis.patching import patched_run
from gptviz.bench.patching import measure, naive_sweep

CLEAN = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
CORRUPT = [3, 1, 4, 1, 7, 9, 2, 6, 5, 3]  # position 4 differs
ANSWER, WRONG = 5, 7


def lively(seed=0, **overrides):
    """A random model whose weights are large enough that a patch moves the logits visibly."""
    model = tiny_model(seed, **{**dict(n_layer=3, n_head=4, n_embd=32, vocab_size=13), **overrides})
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.mul_(5.0)
    return model


@pytest.mark.parametrize("site", ["resid_pre", "attn.z", "mlp.out"])
def test_sweep_equals_the_naive_loop(site):
    model = lively()
    fast = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site=site)
    slow = naive_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site=site)
    L, T, H = 3, len(CLEAN), 4
    assert fast.shape == slow.shape == ((L, H) if site == "attn.z" else (L, T))
    np.testing.assert_allclose(fast, slow, atol=1e-4, rtol=0)
    assert np.abs(slow).max() > 0.05  # the patches did move the answer


def test_sweep_in_small_batches_and_on_other_variants_equals_the_naive_loop():
    model = lively(seed=3, norm="rmsnorm", pos_encoding="sinusoidal", bias=False, activation="relu")
    for site in ("resid_pre", "attn.z", "mlp.out"):  # batches of positions from 3, 6 and 9 read a KV cache
        fast = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site=site, batch_size=3)
        np.testing.assert_allclose(fast, naive_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site=site), atol=1e-4)


def test_a_parallel_blocks_mlp_out_sweep_equals_the_naive_loop():
    """GPT-NeoX's parallel block adds resid_pre + (attn.out + mlp.out): the fast path rebuilds that sum."""
    model = lively(seed=1, parallel=True)
    fast = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site="mlp.out", batch_size=3)
    slow = naive_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site="mlp.out")
    np.testing.assert_allclose(fast, slow, atol=1e-4)
    assert np.abs(slow).max() > 0.05


def test_sweep_values_worked_out_by_hand():
    model = lively()
    s = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG)
    # layer 0, position 4: the corrupt run becomes the clean run, so all of the difference comes back
    np.testing.assert_allclose(s[0, 4], 1.0, atol=1e-4)
    # before position 4 the prompts agree: the patch copies equal values and changes nothing
    np.testing.assert_allclose(s[:, :4], 0.0, atol=1e-4)
    # at layer 0 the clean residual elsewhere equals the corrupt one too: only position 4 matters
    np.testing.assert_allclose(s[0, 5:], 0.0, atol=1e-4)
    # the last position of the last layer's input carries everything the last block reads from it
    z = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site="mlp.out")
    np.testing.assert_allclose(z[:, :4], 0.0, atol=1e-4)


def test_cells_whose_patch_changes_nothing_are_exactly_zero():
    """The corrupt run itself, not a batched run that rounds differently: positions before the first
    difference, layer 0's other positions, and the last MLP's output before the last position."""
    model = lively()
    s = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG)
    assert (s[:, :4] == 0).all() and (s[0, 5:] == 0).all() and (s[1:, 4:] != 0).all()
    m = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site="mlp.out")
    assert (m[:, :4] == 0).all() and (m[-1, :-1] == 0).all() and m[-1, -1] != 0


@pytest.mark.parametrize("overhead", [0, 10**9], ids=["a batch per position", "every cell in one batch"])
def test_every_grouping_of_cells_into_batches_gives_the_patched_runs(monkeypatch, overhead):
    """Runs of several layers share a batch (each joins at its own layer) and positions share one from
    the group's first on: at both extremes of the plan, each cell is its own patched run (worked out
    by hand: a full intervened trace per cell), in a model deep enough for runs to join midway."""
    from gptviz.analysis import patching

    monkeypatch.setitem(patching.BATCH_OVERHEAD, "cpu", overhead)
    model = lively(seed=2, n_layer=4, norm="rmsnorm", pos_encoding="rotary", bias=False)
    clean = gptviz.trace(model, CLEAN)
    d = lambda t: float(t["logits"][-1, ANSWER]) - float(t["logits"][-1, WRONG])  # noqa: E731
    d_clean, d_corrupt = d(clean), d(gptviz.trace(model, CORRUPT))
    for site, cells in (("resid_pre", [(0, 4), (2, 5), (3, 9)]), ("mlp.out", [(1, 6), (3, 9)]), ("attn.z", [(2, 1)])):
        s = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site=site)
        for layer, cell in cells:
            run = patched_run(model, clean, CORRUPT, site, layer, cell)
            assert s[layer, cell] == pytest.approx((d(run) - d_corrupt) / (d_clean - d_corrupt), abs=1e-4)
            assert abs(s[layer, cell]) > 1e-3  # a cell that moved: not a cell skipped as unchanged


def test_patched_run_is_one_cell_of_the_sweep():
    model = lively()
    clean = gptviz.trace(model, CLEAN)
    d = lambda t: float(t["logits"][-1, ANSWER]) - float(t["logits"][-1, WRONG])  # noqa: E731
    d_clean, d_corrupt = d(clean), d(gptviz.trace(model, CORRUPT))
    for site, cell in (("resid_pre", 6), ("attn.z", 2), ("mlp.out", 4)):
        s = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site=site)
        run = patched_run(model, clean, CORRUPT, site, 1, cell)
        assert len(run.interventions) == 1 and run.interventions[0].name == gptviz.point(site, 1)
        np.testing.assert_allclose((d(run) - d_corrupt) / (d_clean - d_corrupt), s[1, cell], atol=1e-4)


BAD = [
    (dict(corrupt_ids=CORRUPT[:-1]), "same length"),
    (dict(site="attn.q"), "resid_pre, attn.z, mlp.out"),
    (dict(answer=5, wrong=5), "the same"),
    (dict(answer=13), r"\[0, 12\]"),
    (dict(wrong=-1), r"\[0, 12\]"),
    (dict(answer=1.0), "answer token"),
    (dict(corrupt_ids=CLEAN), "nothing for a patch to restore"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m for _, m in BAD])
def test_bad_sweeps_are_refused_with_a_message(change, message):
    args = dict(clean_ids=CLEAN, corrupt_ids=CORRUPT, answer=ANSWER, wrong=WRONG, site="resid_pre") | change
    with pytest.raises(gptviz.PromptError, match=message):
        gptviz.patching_sweep(lively(), **args)


def test_benchmark_reports_the_speed_up(capsys):
    # the timing is printed, not asserted: shared CI machines are too noisy for a timed assertion
    result = measure(n_layer=2, n_head=4, n_embd=64, vocab_size=97, T=12, repeats=1)
    print(result)
    assert result["max_abs_diff"] < 1e-4 and result["naive_s"] > 0 and result["sweep_s"] > 0
    assert result["cells"] == 2 * 12


@pytest.fixture(scope="module")
def char_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ck") / "tiny"
    model = lively()
    gptviz.save(model, path, gptviz.CharTokenizer(list("abcdefghijklm")))
    return path, model


def test_cli_patch_writes_the_sweep_as_csv_and_npz(char_checkpoint, tmp_path, capsys):
    from gptviz.cli import main

    path, model = char_checkpoint
    args = ["patch", "--checkpoint", str(path), "--clean", "dbebfjcgfd", "--corrupt", "dbebhjcgfd"]
    args += ["--answer", "f", "--wrong", "h"]  # the same ids as CLEAN, CORRUPT, ANSWER, WRONG above
    assert main([*args, "--site", "mlp.out", "--out", str(tmp_path / "s.csv")]) == 0
    assert "mlp.out sweep (3 layers x 10 positions)" in capsys.readouterr().out
    df = pd.read_csv(tmp_path / "s.csv", keep_default_na=False)
    assert list(df.columns) == ["layer", "position", "token", "value"] and len(df) == 30
    assert "".join(df.token[:10]) == "dbebfjcgfd"
    expected = gptviz.patching_sweep(model, CLEAN, CORRUPT, ANSWER, WRONG, site="mlp.out")
    np.testing.assert_allclose(df.value.to_numpy().reshape(3, 10), expected, atol=1e-6)
    assert main([*args, "--site", "attn.z", "--out", str(tmp_path / "s.npz")]) == 0
    with np.load(tmp_path / "s.npz") as f:
        assert f["sweep"].shape == (3, 4) and str(f["site"]) == "attn.z" and int(f["answer"]) == ANSWER
        np.testing.assert_array_equal(f["corrupt_ids"], CORRUPT)


CLI_BAD = [
    (["--clean", "abc", "--corrupt", "abcd", "--answer", "a", "--wrong", "b"], "same length"),
    (["--clean", "abc", "--corrupt", "abd", "--answer", "ab", "--wrong", "b"], "must be exactly one"),
    (["--clean", "abc", "--corrupt", "abd", "--answer", "z", "--wrong", "b"], "does not know"),
    (["--clean", "abc", "--corrupt", "abd", "--answer", "", "--wrong", "b"], "empty"),
    (["--ids", "--clean", "1,2", "--corrupt", "1,3", "--answer", "1,2", "--wrong", "3"], "one token id each"),
    (["--ids", "--clean", "1,2", "--corrupt", "1,99", "--answer", "1", "--wrong", "3"], "outside the vocabulary"),
    (["--clean", "abc", "--corrupt", "abd", "--answer", "a", "--wrong", "b", "--site", "attn.q"], "invalid choice"),
]


@pytest.mark.parametrize("extra,message", CLI_BAD, ids=[m for _, m in CLI_BAD])
def test_cli_patch_bad_input_is_one_line(char_checkpoint, tmp_path, capsys, extra, message):
    from gptviz.cli import main

    path, _ = char_checkpoint
    try:
        status = main(["patch", "--checkpoint", str(path), *extra, "--out", str(tmp_path / "s.csv")])
    except SystemExit as e:  # argparse's own refusals exit; ours return 2
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s.csv").exists()
