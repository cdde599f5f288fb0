"""The tiny head's whole chain on the lesson's slides (X and the weights → Q, K, V → scores → weights
→ output), on a preset's numbers and on a teacher's own: every number a slide shows is checked
against a hand computation (plain loops, no library attention) and the output against gptviz's real
attention module (CausalSelfAttention, the code every model runs). A teacher's numbers are checked
when the file loads, each error on one line naming the slide's line."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from gptviz.analysis import worked
from gptviz.config import GPTConfig
from gptviz.dashboard.classroom.lesson_check import check_lesson
from gptviz.lessons import STEPS, LessonError, chain, content, parse_lesson, shipped_lesson
from gptviz.model import CausalSelfAttention

OWN = """title = "own"
[[slides]]
page = "mask"
title = "first"

[[slides]]
page = "tiny-head"
title = "our head"
step = "{step}"
X  = [[1, 0, 2], [0, 1, -1], [1, 1, 0], [0.5, 0, 1]]
Wq = [[1, 0], [0, 2], [1, -1]]
Wk = [[0, 1], [1, 0], [-1, 1]]
Wv = [[1, 0, 0], [0, 1, 0], [2, 0, -1]]
"""
OWN_NUMBERS = dict(
    X=[[1, 0, 2], [0, 1, -1], [1, 1, 0], [0.5, 0, 1]],
    Wq=[[1, 0], [0, 2], [1, -1]],
    Wk=[[0, 1], [1, 0], [-1, 1]],
    Wv=[[1, 0, 0], [0, 1, 0], [2, 0, -1]],
)


def by_hand(X, Wq, Wk, Wv, causal=True) -> dict:
    """The head with pencil-and-paper loops: no matrix library, no attention code."""

    def matmul(a, b):
        return [[sum(a[i][c] * b[c][j] for c in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]

    Q, K, V = matmul(X, Wq), matmul(X, Wk), matmul(X, Wv)
    T, dk = len(X), len(Wq[0])
    scores = [[sum(Q[i][c] * K[j][c] for c in range(dk)) / math.sqrt(dk) for j in range(T)] for i in range(T)]
    masked = [[-math.inf if causal and j > i else scores[i][j] for j in range(T)] for i in range(T)]
    weights = []
    for row in masked:
        top = max(row)
        e = [math.exp(s - top) for s in row]
        weights.append([x / sum(e) for x in e])
    output = matmul(weights, V)
    return dict(Q=Q, K=K, V=V, scores=scores, masked=masked, weights=weights, output=output)


def cells(table) -> np.ndarray:
    """A slide's table as numbers (its cells are text: 4 decimals, − for minus, −∞)."""
    return np.array([[float(x.replace("−∞", "-inf").replace("−", "-")) for x in row] for row in table.values])


def panels(fig) -> list[np.ndarray]:
    return [np.array(t.z, dtype=float) for t in fig.data]


def slide_at(step: str, text: str = OWN) -> object:
    return parse_lesson(text.replace("{step}", step), "own").slides[1]


@pytest.mark.parametrize("source", ["sharp", "own"])
def test_every_step_shows_the_numbers_a_hand_computation_gives(source):
    if source == "own":
        nums = OWN_NUMBERS
        slide = lambda step: slide_at(step)  # noqa: E731
    else:
        nums = worked.TOY_ATTENTION_SHARP
        lesson = shipped_lesson("how-attention-works")
        slide = lambda step: next(s for s in lesson.slides if s.step == step)  # noqa: E731
    h = by_hand(**nums)
    X = np.array(nums["X"], float)
    W = [np.array(nums[k], float) for k in ("Wq", "Wk", "Wv")]
    c = {step: content.build(slide(step)) for step in STEPS}
    close = dict(atol=5e-5)  # the tables show 4 decimals
    assert np.allclose(cells(c["input"].table), X, **close)
    for shown, want in zip(panels(c["input"].figure), W, strict=True):
        assert np.allclose(shown, want)
    assert np.allclose(cells(c["qkv"].table), np.concatenate(W, axis=1), **close)
    assert all(map(np.allclose, panels(c["qkv"].figure), [X, h["Q"], h["K"], h["V"]]))
    assert np.allclose(cells(c["scores"].table), np.concatenate([h["Q"], h["K"]], axis=1), **close)
    (scores,) = panels(c["scores"].figure)
    assert np.allclose(scores, h["scores"])
    assert np.array_equal(cells(c["weights"].table) == -np.inf, np.isinf(h["masked"]))  # −∞ where masked
    assert np.allclose(np.nan_to_num(panels(c["weights"].figure)[0]), h["weights"], atol=1e-9)
    weights, output = panels(c["output"].figure)
    assert np.allclose(weights, h["weights"]) and np.allclose(output, h["output"])
    assert np.allclose(cells(c["output"].table), h["V"], **close)
    # each cell's number is written in it, to 4 decimals, as the tables write them
    assert c["output"].figure.data[1].text[0][0] == chain.short(h["output"][0][0])
    assert chain.short(3.0) == "3" and chain.short(-0.25) == "−0.25" and chain.short(6.36396) == "6.364"


@pytest.mark.parametrize("mask", [True, False])
def test_the_output_is_what_the_real_attention_code_computes(mask):
    """The teacher's numbers as the weights of gptviz's own attention module (one head, no biases):
    its output, before the output projection, is the slide's output."""
    nums = dict(OWN_NUMBERS, Wv=[[1, 0], [0, 1], [2, -1]])  # one head size for q, k and v, as a model has
    X, Wq, Wk, Wv = (torch.tensor(nums[k], dtype=torch.float64) for k in ("X", "Wq", "Wk", "Wv"))
    attn = CausalSelfAttention(GPTConfig(n_embd=3, n_head=1, head_size=2, bias=False, dropout=0.0)).double()
    with torch.no_grad():
        attn.c_attn.weight.copy_(torch.cat([Wq, Wk, Wv], dim=1).T)  # Linear: y = x Wᵀ
        y = attn(X[None]) if mask else None
    text = OWN.replace("{step}", "output").replace(
        "Wv = [[1, 0, 0], [0, 1, 0], [2, 0, -1]]", "Wv = [[1, 0], [0, 1], [2, -1]]"
    )
    if not mask:
        text = text.replace('step = "output"', 'step = "output"\nmask = false')
    _, output = panels(content.build(parse_lesson(text, "own").slides[1]).figure)
    assert np.allclose(output, by_hand(**nums, causal=mask)["output"])
    if mask:  # the module is causal: compare where it runs
        want = torch.tensor(output) @ attn.c_proj.weight.T  # its output projection, applied to the slide's output
        assert torch.allclose(y[0], want, atol=1e-12)


def test_the_shipped_lesson_walks_the_chain_in_order():
    lesson = shipped_lesson("how-attention-works")
    steps = [s.step for s in lesson.slides if s.step is not None]
    assert steps == list(STEPS)
    check_lesson(lesson)


def bad(extra: str, replace: tuple[str, str] = ("", "")) -> str:
    text = OWN.replace("{step}", "weights").replace(*replace)
    with pytest.raises(LessonError) as e:
        parse_lesson(text + extra, "own")
    message = str(e.value)
    # the line of the key the message is about (X, Wq, … on lines 10-13, what is added on 14), else the
    # slide's [[slides]] (line 6: a key that is missing)
    assert "\n" not in message and re.match(r"line (6|9|10|11|12|13|14), slide 2: ", message), message
    return message


def test_a_teachers_numbers_are_checked_at_load_with_the_line():
    assert "'Wv' is missing" in bad("", ("Wv = [[1, 0, 0], [0, 1, 0], [2, 0, -1]]", ""))
    assert "line 6, slide 2: a tiny head's own numbers need" in bad("", ("Wv = [[1, 0, 0], [0, 1, 0], [2, 0, -1]]", ""))
    assert "line 11, slide 2: Wq has 2 rows; it needs one per column of X (3)" in bad(
        "", ("Wq = [[1, 0], [0, 2], [1, -1]]", "Wq = [[1, 0], [0, 2]]")
    )
    assert "Wq has 2 columns and Wk 1" in bad("", ("Wk = [[0, 1], [1, 0], [-1, 1]]", "Wk = [[0], [1], [-1]]"))
    assert "X: row 1 has 2 numbers and row 0 has 3" in bad("", ("[0, 1, -1]", "[0, 1]"))
    assert "only numbers" in bad("", ("[0, 1, -1]", '[0, "1", -1]'))
    assert "only numbers" in bad("", ("[0, 1, -1]", "[0, true, -1]"))
    assert "from −1000 to 1000" in bad("", ("[0, 1, -1]", "[0, nan, -1]"))
    assert "from −1000 to 1000" in bad("", ("[0, 1, -1]", "[0, inf, -1]"))
    assert "from −1000 to 1000" in bad("", ("[0, 1, -1]", "[0, 1e300, -1]"))
    nine = "[" + ", ".join(["[1, 0, 2]"] * 9) + "]"
    assert "larger than 8 × 8" in bad("", ("X  = [[1, 0, 2], [0, 1, -1], [1, 1, 0], [0.5, 0, 1]]", f"X = {nine}"))
    assert "a list of rows" in bad("", ("X  = [[1, 0, 2], [0, 1, -1], [1, 1, 0], [0.5, 0, 1]]", "X = [1, 2]"))
    assert "either 'preset' or your own" in bad('preset = "sharp"\n')
    assert "step 'sideways' is not one of input, qkv" in bad("", ('step = "weights"', 'step = "sideways"'))
    with pytest.raises(LessonError, match="line 4, slide 1: 'X' belongs on a tiny-head slide"):
        parse_lesson('[[slides]]\npage = "mask"\ntitle = "t"\nX = [[1]]\n')


def test_what_a_slide_frames_exists_in_the_teachers_numbers():
    ok = parse_lesson(OWN.replace("{step}", "weights") + "highlight = { cell = [3, 2] }\n", "own")
    check_lesson(ok)  # 4 tokens: row 3 exists
    too_far = parse_lesson(OWN.replace("{step}", "weights") + "highlight = { row = 4 }\n", "own")
    with pytest.raises(LessonError, match="line 14, slide 2: highlight row 4 does not exist: your own X has 4 tokens"):
        check_lesson(too_far)
    no_heatmap = parse_lesson(OWN.replace("{step}", "qkv") + "highlight = { row = 1 }\n", "own")
    with pytest.raises(LessonError, match="at step 'qkv' draws no heatmap"):
        check_lesson(no_heatmap)


def test_the_docs_lesson_examples_load():
    text = (Path(__file__).resolve().parents[1] / "docs" / "classroom.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    for block in blocks:
        lesson = parse_lesson(block, "docs")
        if all(s.page in ("tiny-head", "predict") for s in lesson.slides):  # the others name no model here
            check_lesson(lesson)
    own = next(parse_lesson(b, "docs").slides[0] for b in blocks if "Wq" in b)
    assert own.numbers is not None and own.step == "scores"
