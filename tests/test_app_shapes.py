"""The Shapes page through AppTest: the sizes it names are the run's tensors' own (T from the prompt, C,
H, D, V, L from the checkpoint's config), and its table lists every module the forward pass called."""

from __future__ import annotations

from apptest_helpers import PROMPT, figure, ok, reference_trace, run_prompt

from gptviz import analysis
from gptviz.bench.checkpoints import CONFIG


def test_the_sizes_are_the_runs_and_the_configs(at, env):
    ok(run_prompt(at, PROMPT))
    ok(at.switch_page("views/shapes.py").run())
    assert at.title[0].value == "Shapes"
    shown = {m.label.split(" ")[0]: int(m.value) for m in at.metric}
    t = reference_trace(env, PROMPT)
    head_dim = CONFIG["n_embd"] // CONFIG["n_head"]
    want = dict(B=1, T=t.n_tokens, C=CONFIG["n_embd"], H=CONFIG["n_head"], D=head_dim, V=CONFIG["vocab_size"])
    assert {k: shown[k] for k in want} == want and shown["L"] == CONFIG["n_layer"]
    assert t.n_tokens == len(PROMPT)  # a character tokenizer: one token per character
    table = at.dataframe[0].value if at.dataframe else None
    rows = len(analysis.shape_table(t))
    assert (table is not None and len(table) == rows) or len(at.table[0].value) == rows
    assert figure(at, "shape_flow")["data"], "the flow is drawn"
