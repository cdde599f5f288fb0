"""The Compare page through AppTest: numbers on screen against gptviz.analysis.compare, a centred
difference scale, and clear messages for what cannot be compared (the Timeline page's tests share
these checkpoints)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import app_session, array, figure, ok, serve
from streamlit.testing.v1 import AppTest

import gptviz
from gptviz.analysis import compare as cmp
from gptviz.bench.checkpoints import CONFIG, NAME, make_overtime_checkpoints

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "To be, or not to be"
PROMPT_B = "To be, or not to go"  # same length, differs at position 17


@pytest.fixture(scope="module")
def ckpt_root(tmp_path_factory) -> Path:
    return make_overtime_checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def at(ckpt_root, monkeypatch) -> AppTest:
    serve(monkeypatch, ckpt_root, NAME)
    return app_session(timeout=90, prompt=PROMPT, layer="1", head="2")


def traces(root: Path, name_a: str, name_b: str, prompt_b: str):
    a_b, b_b = gptviz.load(root / name_a), gptviz.load(root / name_b)
    ids_a = gptviz.encode_prompt(a_b.tokenizer, PROMPT, 64)
    ids_b = gptviz.encode_prompt(b_b.tokenizer, prompt_b, 64)
    return gptviz.trace(a_b.model, ids_a, a_b.tokenizer), gptviz.trace(b_b.model, ids_b, b_b.tokenizer)


def test_two_prompts_on_one_checkpoint(at, ckpt_root):
    at = ok(at.switch_page("views/compare.py").run())
    at.text_input(key="cmp_prompt_b").set_value(PROMPT_B)
    at = ok(at.run())
    a, b = traces(ckpt_root, NAME, NAME, PROMPT_B)
    diff = figure(at, "cmp_att_diff")["data"][0]
    want = cmp.attention_difference(a, b, 1)[2]
    z = array(diff["z"])
    causal = np.tril(np.ones_like(want, dtype=bool))
    assert np.allclose(z[causal], want[causal], atol=1e-6)
    assert np.isnan(z[~causal]).all()  # masked cells are not drawn
    assert diff["zmin"] == pytest.approx(-diff["zmax"]) and diff["zmax"] > 0  # centred on 0
    assert diff["zmax"] == pytest.approx(np.abs(want[causal]).max(), rel=1e-6)
    kl = array(figure(at, "cmp_kl")["data"][0]["y"])
    assert np.allclose(kl, cmp.next_token_divergence(a, b)["kl_ab"], atol=1e-9)
    assert np.allclose(kl[:17], 0, atol=1e-9) and (kl[17:] > 0).all()
    assert "position 17" in [m.value for m in at.metric]
    loss = figure(at, "cmp_loss")["data"]
    ref = cmp.loss_comparison(a, b)
    assert np.allclose(array(loss[0]["y"]), ref["loss_a"]) and np.allclose(array(loss[1]["y"]), ref["loss_b"])
    mean = next(m for m in at.metric if m.label.startswith("Mean loss of B"))
    assert mean.value == f"{ref['loss_b'].mean():.3f}"
    assert mean.proto.delta == f"{ref['loss_b'].mean() - ref['loss_a'].mean():+.3f} from A"


def test_the_same_prompt_is_zero_difference_and_says_so(at):
    at = ok(at.switch_page("views/compare.py").run())
    at.text_input(key="cmp_prompt_b").set_value(PROMPT)
    at = ok(at.run())
    assert np.nansum(np.abs(array(figure(at, "cmp_att_diff")["data"][0]["z"]))) == 0
    assert np.all(array(figure(at, "cmp_kl")["data"][0]["y"]) == 0)
    assert any("the same" in i.value for i in at.info)
    mean = next(m for m in at.metric if m.label.startswith("Mean loss of B"))
    assert mean.proto.delta == "+0.000 from A"
    assert mean.proto.direction == mean.proto.MetricDirection.NONE and mean.proto.color == mean.proto.MetricColor.GRAY


def test_one_prompt_on_two_checkpoints_and_head_score_change(at, ckpt_root):
    at = ok(at.switch_page("views/compare.py").run())
    at.radio(key="cmp_mode").set_value("one prompt, two checkpoints")
    at = at.run()  # the first in the list is the fixtures' broken folder: its message, then the choice
    assert not at.exception
    at.selectbox(key="cmp_ckpt_b").set_value("tiny-char-2")
    at = ok(at.run())
    a, b = traces(ckpt_root, NAME, "tiny-char-2", PROMPT)
    grid = array(figure(at, "cmp_heads")["data"][0]["z"])
    ref = cmp.head_score_change(a, b)["induction_change"].to_numpy().reshape(CONFIG["n_layer"], CONFIG["n_head"])
    assert np.allclose(grid, ref, atol=1e-9)
    heat = figure(at, "cmp_heads")["data"][0]
    assert heat["zmin"] == pytest.approx(-heat["zmax"])


def test_a_checkpoint_of_another_shape_is_a_sentence_not_a_traceback(at):
    at = ok(at.switch_page("views/compare.py").run())
    at.radio(key="cmp_mode").set_value("one prompt, two checkpoints")
    at = at.run()
    at.selectbox(key="cmp_ckpt_b").set_value("tiny-deep")
    at = at.run()
    assert not at.exception
    assert any("layers" in e.value and "same shape" in e.value for e in at.error)


def test_a_prompt_of_another_length_is_refused(at):
    at = ok(at.switch_page("views/compare.py").run())
    at.text_input(key="cmp_prompt_b").set_value("To be")
    at = at.run()
    assert not at.exception
    assert any("same length" in e.value for e in at.error)


# --- Compare's checkpoint B: a default that fits A, a sentence when B cannot, names in titles -------
def two_checkpoints(at: AppTest) -> AppTest:
    at = ok(at.switch_page("views/compare.py").run())
    at.radio(key="cmp_mode").set_value("one prompt, two checkpoints")
    return at.run()


def test_b_defaults_to_a_checkpoint_of_as_shape_and_names_both(at):
    at = ok(two_checkpoints(at))
    pick = at.selectbox(key="cmp_ckpt_b")
    assert pick.value == "tiny-char-2"  # the first of A's shape, not the first in the folder ("broken")
    assert pick.options[0] == "tiny-char-2 · same shape as A"  # A's shape first, and marked
    assert "tiny-deep" in pick.options and "broken" in pick.options and NAME not in pick.options
    titles = [figure(at, k)["layout"]["title"]["text"] for k in ("cmp_att_a", "cmp_att_b")]
    assert titles == [f"A: {NAME}", "B: tiny-char-2"]
    loss = figure(at, "cmp_loss")["layout"]["title"]["subtitle"]["text"]
    assert f"A: {NAME}" in loss and "B: tiny-char-2" in loss and "sidebar" not in loss


def test_b_is_none_when_nothing_fits_a(ckpt_root, monkeypatch):
    serve(monkeypatch, ckpt_root, "tiny-deep")  # three layers: no other checkpoint has them
    at = ok(two_checkpoints(ok(app_session(timeout=90, prompt=PROMPT))))
    assert at.selectbox(key="cmp_ckpt_b").value is None
    assert any("Choose checkpoint B" in i.value for i in at.info) and not at.get("plotly_chart")


def test_another_vocabulary_is_one_line_before_anything_runs(at, ckpt_root, monkeypatch):
    other = gptviz.CharTokenizer(list("abcdefghij"))  # 10 tokens: A's ids up to 94 would not fit
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**dict(CONFIG, vocab_size=10))), ckpt_root / "other-vocab", other)
    shuffled = gptviz.CharTokenizer(list(reversed(gptviz.load(ckpt_root / NAME).tokenizer.itos)))
    gptviz.save(gptviz.GPT(gptviz.GPTConfig(**CONFIG)), ckpt_root / "other-order", shuffled)
    ran = []
    try:
        at = two_checkpoints(at)  # on the default B, which fits
        monkeypatch.setattr(cmp, "check_comparable", lambda a, b: ran.append(b))  # from here B must not run
        for name, said in (
            ("other-vocab", f"a vocabulary of {CONFIG['vocab_size']}; B: other-vocab has 2 × 4 and 10"),
            ("other-order", "other tokens behind the same ids"),
        ):
            at.selectbox(key="cmp_ckpt_b").set_value(name)
            at = at.run()
            assert not at.exception
            errors = [e.value.replace("\\", "") for e in at.error]  # Markdown escapes undone
            assert len(errors) == 1 and said in errors[0], errors
            assert "outside the vocabulary" not in errors[0] and f"A: {NAME}" in errors[0]
        assert not ran
    finally:
        for name in ("other-vocab", "other-order"):
            for f in (ckpt_root / name).iterdir():
                f.unlink()
            (ckpt_root / name).rmdir()


def test_a_long_path_b_is_named_whole(at, ckpt_root, tmp_path):
    deep = tmp_path / ("a-folder-with-a-long-name-" * 3) / "run" / "step-000100"
    deep.parent.mkdir(parents=True)
    (ckpt_root / "tiny-char-2").rename(deep)
    try:
        at = two_checkpoints(at)
        at.selectbox(key="cmp_ckpt_b").set_value("a local path…")
        at = at.run()
        at.text_input(key="cmp_path_b").input(str(deep))
        at = ok(at.run())
        title = figure(at, "cmp_att_b")["layout"]["title"]["text"]
        assert title.replace("<br>", "") == f"B: {deep}" and "<br>" in title  # broken into lines, not cut
    finally:
        deep.rename(ckpt_root / "tiny-char-2")


def test_the_next_token_table_shows_spaces(at):
    at = ok(at.switch_page("views/compare.py").run())
    at.text_input(key="cmp_prompt_b").set_value(PROMPT_B)
    at = ok(at.run())
    table = next(d.value for d in at.dataframe if "token_a" in d.value.columns)
    assert table["token_a"].tolist()[2] == "␣" and table["token_b"].tolist()[2] == "␣"  # "To be": position 2
    assert "" not in table["token_a"].tolist() and " " not in table["token_a"].tolist()
