"""train_transcoders(..., engine="ray") against a real Ray head started as its own process on 127.0.0.1
(2 CPUs, a 96 MB object store; conftest's ray_head, stopped after with nothing of it left), reached
through RAY_ADDRESS with the cluster's token, as a person with a cluster would (`gptviz transcoders train
--engine ray`, its own process): the workers compute every layer's mlp.in and mlp.out, and the
transcoders trained from them are the local engine's."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_model

import gptviz

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # starting Ray takes seconds
TOK = gptviz.CharTokenizer([chr(97 + i) for i in range(11)])
DOCS = [list(np.random.default_rng(i).integers(0, 11, size=120)) for i in range(12)]


def test_transcoders_trained_on_a_ray_head_equal_the_local_engines(ray_head, tmp_path):
    ckpt = gptviz.save(tiny_model(), tmp_path / "ckpt", TOK)
    data = tmp_path / "corpus.txt"
    data.write_text("".join(chr(97 + int(i)) for d in DOCS for i in d))
    args = dict(width=4, k=8, steps=40, seed=1, lr=5e-3, threads=1)
    local = gptviz.train_transcoders(ckpt, data, **args)
    few = gptviz.train_transcoders(ckpt, data, **{**args, "steps": 2})
    cmd = [sys.executable, "-m", "gptviz", "transcoders", "train", "--checkpoint", str(ckpt), "--data", str(data)]
    cmd += ["--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-timeout", "60"]
    cmd += [x for key, value in args.items() for x in (f"--{key}", str(value))]
    done = subprocess.run(cmd, env=ray_head, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(ray)" in done.stdout and "tokens/s" in done.stdout, done.stdout
    on_ray = gptviz.load_transcoders(tmp_path / "ray")
    layers = on_ray.meta["gptviz_training"]["layers"]
    for l in (0, 1):
        assert layers[l]["engine"] == "ray" and layers[l]["tokens"] == local[l].report.tokens == 40 * 1024
        for name in ("W_enc", "W_dec", "b_enc", "b_dec"):
            torch.testing.assert_close(getattr(on_ray[l], name), getattr(local[l], name), rtol=0, atol=1e-6)
        assert layers[l]["fvu"] == pytest.approx(local[l].report.fvu, abs=1e-6)
        assert layers[l]["fvu"] < 0.95 * few[l].report.fvu  # it learned
