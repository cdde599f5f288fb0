"""The Features page's heatmap (figures.features.feature_heatmap): a long prompt's window of rows says
which positions of how many it draws, and draws the activations it is given, unchanged."""

import numpy as np

from gptviz.figures.features import feature_heatmap


def test_a_window_of_rows_is_drawn_as_given_and_said():
    acts = np.arange(24, dtype=np.float32).reshape(8, 3)
    labels = [f"t{i}" for i in range(8)]
    fig = feature_heatmap(acts[2:6], labels[2:6], [5, 9, 11], first=2, n_tokens=8)
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), acts[2:6])
    assert list(fig.data[0].y) == labels[2:6]
    assert fig.layout.title.text.startswith("The prompt's 3 strongest features at positions 2–5 of its 8 tokens")
    whole = feature_heatmap(acts, labels, [5, 9, 11])
    assert whole.layout.title.text.startswith("The prompt's 3 strongest features at each of its 8 tokens")
