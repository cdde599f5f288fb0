"""The shipped lesson's texts say what its numbers show (issue 38, "slide texts reviewed for truth by the
numbers they show"): each claim of a note or caption checked against the numbers the slide computes, by
hand where the slide is a worked example."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import gptviz
from gptviz.analysis import worked
from gptviz.analysis.heads import LABEL_THRESHOLDS
from gptviz.lessons import content, shipped_lesson

ROOT = Path(__file__).resolve().parents[1]
LESSON = shipped_lesson("how-attention-works")
SHARP = worked.toy_attention(**{k: worked.TOY_PRESETS["sharp"][k] for k in ("X", "Wq", "Wk", "Wv")})
TEXTBOOK = worked.toy_attention(**{k: worked.TOY_PRESETS["textbook"][k] for k in ("X", "Wq", "Wk", "Wv")})


def slide(title_start: str):
    return next(s for s in LESSON.slides if s.title.startswith(title_start))


def test_a_key_is_a_label_not_an_answer_and_the_sharp_head_matches_as_said():
    note = slide("One attention head").note
    assert "an answer" not in " ".join(s.note for s in LESSON.slides)
    assert "label" in note and "key" in note
    # "Token 1's question matches token 0's key, token 2's matches token 1's": their largest scores
    assert "Token 1's question matches token 0's key, token 2's matches token 1's." in note
    w = SHARP["weights"]
    assert int(np.nanargmax(w[1])) == 0 and int(np.nanargmax(w[2])) == 1


def test_the_worked_numbers_the_notes_quote():
    q = re.search(r"Q\[t1, q0\] = (\S+)\.", slide("Step 2 of 5").note)
    assert q and float(q.group(1)) == SHARP["Q"][1, 0]
    scores = slide("Step 3 of 5").note
    d_k = SHARP["Q"].shape[-1]
    assert f"√d_k = √{d_k}" in scores and "keeps the scores' spread" in scores  # the reason for √d_k
    # "With small weights every score is close to 0, so the softmax spreads each row almost evenly"
    w = TEXTBOOK["weights"]
    assert np.abs(TEXTBOOK["scores"]).max() < 0.05
    for t in range(len(w)):
        assert np.nanmax(w[t, : t + 1]) - np.nanmin(w[t, : t + 1]) < 0.02


def test_the_threshold_and_the_scores_are_named_where_they_show():
    threshold = max(LABEL_THRESHOLDS.values())
    induction = slide("An induction head")
    bundle = gptviz.load(ROOT / "checkpoints" / induction.checkpoint)
    trace = gptviz.trace(bundle.model, bundle.tokenizer.encode(induction.prompt), bundle.tokenizer)
    c = content.build(induction, bundle, trace)
    facts = dict(c.facts)
    assert "induction score" in facts  # the number shown is named...
    assert "share of attention on its pattern" in c.caption  # ... said what it is ...
    assert f"{threshold:g} or more names it" in c.caption  # ... and the threshold named
    # "10 symbols, said twice"
    assert "10 symbols, said twice" in induction.note
    p = induction.prompt
    assert len(p) == 20 and len(set(p[:10])) == 10 and p[:10] == p[10:]
    heads = slide("The heads of one layer")
    bundle = gptviz.load(ROOT / "checkpoints" / heads.checkpoint)
    trace = gptviz.trace(bundle.model, bundle.tokenizer.encode(heads.prompt), bundle.tokenizer)
    assert f"score ≥ {threshold:g}" in content.build(heads, bundle, trace).table_title
    # "head 3 mostly reads the token one step back, head 2 two steps back, head 4 three or four": how
    # far back the key each head weighs most lies, at the 6 positions its tile shows
    weights, T = trace[f"blocks.{heads.layer}.attn.weights"], trace.n_tokens
    back = {h: [T - 6 + i - int(weights[h, T - 6 + i].argmax()) for i in range(6)] for h in (2, 3, 4)}
    assert back[3].count(1) >= 4 and set(back[2]) == {2} and set(back[4]) <= {3, 4}, back
