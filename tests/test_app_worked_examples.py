"""The Worked examples page through AppTest: the toy head's numbers on screen are the ones a person
computes by hand from its inputs, and turning the causal mask off lets weight reach the future."""

from __future__ import annotations

import numpy as np
from apptest_helpers import app_session, ok

from gptviz.analysis import worked


def numbers(table) -> np.ndarray | None:
    """A table's cells as numbers; None for one that shows text (a masked score is "−∞")."""
    try:
        return table.to_numpy(dtype=np.float64)
    except ValueError:
        return None


def shown_future_mass(at) -> float:
    return float(next(m.value for m in at.metric if m.label == "Future attention mass"))


def test_the_toy_heads_weights_are_the_hand_computation(env):
    at = ok(app_session("views/worked_examples.py"))
    d = worked.TOY_PRESETS["textbook"]
    X, Wq, Wk = (np.array(d[k], dtype=np.float64) for k in ("X", "Wq", "Wk"))
    scores = (X @ Wq) @ (X @ Wk).T / np.sqrt(2)  # d_k = 2
    scores[np.triu_indices(3, 1)] = -np.inf
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    tables = [df.value for df in at.dataframe] + [t.value for t in at.table]
    shown = [n for n in map(numbers, tables) if n is not None and n.shape == (3, 3)]
    assert any(np.allclose(n, weights, atol=1e-4) for n in shown), "the causal weights, as computed by hand"
    assert shown_future_mass(at) == 0.0
    at.toggle(key="w4_mask").set_value(False)
    ok(at.run())
    assert shown_future_mass(at) > 0.0
