"""The class-vs-model round (lessons.class_round): every number against the library's own (a softmax
of the model's last logits worked by hand, gptviz.logit_lens) on a random model and a shipped one."""

from pathlib import Path

import numpy as np
import pytest
import torch

import gptviz
from gptviz.lessons.class_round import (
    TOP_K,
    check_guess,
    class_round,
    depth_words,
    guess_token,
    round_lines,
    round_table,
)
from gptviz.lessons.poll import OTHER, GuessError

CHARS = list("abcdefghijklmnopqrstuvwxyz ")
SHIPPED = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = gptviz.GPTConfig(vocab_size=len(CHARS), block_size=32, n_layer=2, n_head=2, n_embd=16)
    model = gptviz.GPT(cfg).eval()
    tok = gptviz.CharTokenizer(CHARS)
    ids = tok.encode("the cat sat on th")
    return model, tok, ids, gptviz.trace(model, ids, tok)


def by_hand(model, ids) -> np.ndarray:
    """The last position's probabilities from the plain forward, exp / sum written out in float64."""
    with torch.no_grad():
        z = model(torch.tensor([ids]))[0, -1].double().numpy()
    e = np.exp(z - z.max())
    return e / e.sum()


def test_probabilities_are_the_softmax_of_the_last_logits(tiny):
    model, tok, ids, trace = tiny
    p = by_hand(model, ids)
    r = class_round(model, trace, tok, [("e", 4), ("␣", 2), ("q", 1), (OTHER, 3)])
    assert r.answers == 10 and r.position == len(ids) - 1
    for g in r.guesses:
        want = CHARS.index(" " if g.text == "␣" else g.text)
        assert g.token_id == want
        assert g.prob == pytest.approx(p[want], abs=1e-6)
        assert g.logprob == pytest.approx(np.log(p[want]), abs=1e-5)
    # the room's score: each answer's probability, averaged over every answer (OTHER's count 0)
    want = (4 * p[CHARS.index("e")] + 2 * p[CHARS.index(" ")] + p[CHARS.index("q")]) / 10
    assert r.score == pytest.approx(want, abs=1e-6)
    order = np.argsort(-p, kind="stable")[:TOP_K]
    assert list(r.top["token_id"]) == [int(i) for i in order]
    np.testing.assert_allclose(r.top["probability"], p[order], atol=1e-6)
    assert r.model_score == pytest.approx(p.max(), abs=1e-6)


def test_depths_are_the_logit_lens_own_ranks(tiny):
    model, tok, ids, trace = tiny
    p = by_hand(model, ids)
    # the room's favourite: the token the model likes least (its lens rank is far from the top)
    worst = int(np.argmin(p))
    r = class_round(model, trace, tok, [(tok.display([worst])[0], 3), ("a", 1)])
    assert [d.who for d in r.depths] == ["the room's favourite", "the model's answer"]
    for d in r.depths:
        lens = gptviz.logit_lens(model, trace, k=5, target=d.token_id)  # every position: the library's own
        ranks = lens.target_rank[:, -1]
        first = lambda below: next((lens.sites[s] for s in range(len(ranks)) if ranks[s] < below), None)  # noqa: E731
        assert (d.top1, d.top5) == (first(1), first(TOP_K))
    answer = r.depths[-1]
    assert answer.token_id == int(np.argmax(p)) and answer.top1 is not None  # the last site is the model's own
    assert r.sites[-1] == f"blocks.{model.config.n_layer - 1}.resid_post"


def test_a_guess_that_names_no_token():
    tok = gptviz.CharTokenizer(CHARS)
    assert guess_token(tok, len(CHARS), "ab") is None
    with pytest.raises(GuessError, match="one character"):
        check_guess(tok, len(CHARS), "ab")
    assert check_guess(tok, len(CHARS), " ") == "␣"


def test_lines_say_never(tiny):
    model, tok, ids, trace = tiny
    r = class_round(model, trace, tok, [("zz", 2)])  # no token: no favourite, the model's answer only
    assert [d.who for d in r.depths] == ["the model's answer"]
    assert r.score == 0.0 and r.mean_logprob is None
    assert list(round_table(r)["model %"]) == ["no token"]
    d = r.depths[0].__class__("x", 0, "a", None, None)
    assert "never" in depth_words(d)
    assert len(round_lines(r)) == 2


def test_shipped_bpe_reads_a_word_typed_without_its_space():
    b = gptviz.load(SHIPPED / "shakespeare-bpe")
    ids = b.tokenizer.encode("ROMEO: What light is")
    trace = gptviz.trace(b.model, ids, b.tokenizer)
    with torch.no_grad():
        z = b.model(torch.tensor([ids]))[0, -1].double()
    p = torch.softmax(z, -1).numpy()
    r = class_round(b.model, trace, b.tokenizer, [("this", 2)])
    (g,) = r.guesses
    # "this" names both the word and the word after a space: the likelier of the two counts
    forms = [i for i in range(b.model.config.vocab_size) if b.tokenizer.display([i])[0] in ("this", "␣this")]
    assert forms and g.token_id == max(forms, key=lambda i: p[i])
    assert g.prob == pytest.approx(p[g.token_id], abs=1e-6)


def test_the_handout_records_the_rooms_guesses():
    from gptviz.lessons import handout, parse_lesson

    lesson = parse_lesson(
        '[[slides]]\npage = "predict"\ntitle = "Next?"\ncheckpoint = "shakespeare-char"\n'
        'prompt = "ROMEO:\\nWhat light is th"\nround = "probability"\n'
    )
    b = gptviz.load(SHIPPED / "shakespeare-char")
    trace = gptviz.trace(b.model, b.tokenizer.encode("ROMEO:\nWhat light is th"), b.tokenizer)
    r = class_round(b.model, trace, b.tokenizer, [("e", 2), ("<b>", 1)])
    page = handout.render(lesson, handout.contents(lesson, handout.local_runs(SHIPPED)), {0: r})
    assert "The room's guesses</h3>" in page and "<td>&lt;b&gt;</td>" in page and "<td><b></td>" not in page
    assert f"<td>{100 * r.guesses[0].prob:.2f}</td>" in page
    assert "The room's guesses" not in handout.render(lesson, handout.contents(lesson, handout.local_runs(SHIPPED)))
