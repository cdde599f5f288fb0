"""`python -m gptviz scan`: the corpus scan from the command line, with a progress bar.

--progress-file: the dashboard starts the scan as its own process and reads this small JSON file
({"done": n, "total": m, "state": "running" | "done" | "error", "message": ...}) to draw its bar.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from .. import cli_args


def add_arguments(p) -> None:
    path = cli_args.path  # any bytes the OS allows, never a NUL
    p.add_argument("--checkpoint", required=True, type=path, help="checkpoint directory or file")
    p.add_argument(
        "--data", required=True, type=path, help=".txt file, folder of .txt files, or .jsonl / .parquet with `text`"
    )
    p.add_argument("--out", required=True, type=path, help="folder to write the tables and summary.json into")
    p.add_argument(
        "--window", type=cli_args.whole(2), default=128, help="tokens per window (default: 128, or block_size)"
    )
    p.add_argument("--k", type=cli_args.whole(1), default=20, help="strongest contexts kept per neuron (default: 20)")
    p.add_argument(
        "--transcoders",
        type=path,
        help="also read this transcoder set (config.yaml + layer_N.safetensors) and keep each feature's top "
        "contexts (the Graph page shows them); local engine",
    )
    p.add_argument("--engine", choices=("local", "ray"), default="local", help="local (default) or ray")
    p.add_argument("--ray-address", help="a Ray cluster to use (default: $RAY_ADDRESS, else a Ray started here)")
    p.add_argument(
        "--ray-timeout",
        type=cli_args.number(0, above=True),
        help="seconds to wait for the Ray cluster (default: $GPTVIZ_RAY_TIMEOUT, else 30)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps (default: cpu)")
    p.add_argument(
        "--threads",
        type=cli_args.whole(1),
        help="torch CPU threads, of each Ray worker with --engine ray (default: one per core here, 2 per Ray "
        "worker; OpenMP waiting passively)",
    )
    p.add_argument("--batch-size", type=cli_args.whole(1), help="windows per batch (default: 2,048 tokens' worth)")
    p.add_argument(
        "--headvis",
        type=path,
        help="also write the heads as HeadVis data (Neuronpedia's load-head-metrics / load-head-sequences read it)",
    )
    p.add_argument("--progress-file", type=path, help="also write progress as JSON to this file (for the dashboard)")
    p.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal (a log file, CI)",
    )


def write_progress(path: str | None, **state) -> None:
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)  # a reader never sees half a file


def run(args) -> None:
    from tqdm import tqdm

    from . import scan

    bar = tqdm(total=0, unit="window", desc="scan", file=sys.stderr, disable=False if args.progress else None)

    def progress(p) -> None:  # a gptviz.Progress
        bar.total = p.total
        bar.n = p.done
        bar.refresh()
        write_progress(args.progress_file, done=p.done, total=p.total, state="running")

    try:
        s = scan(
            args.checkpoint,
            args.data,
            window=args.window,
            k=args.k,
            engine=args.engine,
            out=Path(args.out),
            device=args.device,
            batch_size=args.batch_size,
            ray_address=args.ray_address,
            ray_timeout=args.ray_timeout,
            progress=progress,
            threads=args.threads,
            transcoders=args.transcoders,
        )
    except BaseException as e:
        bar.close()
        write_progress(args.progress_file, state="error", message=" ".join(str(e).split()) or type(e).__name__)
        raise
    bar.close()
    if args.headvis:
        from ..formats import load
        from .headvis import write_headvis

        started = time.perf_counter()
        bundle = load(args.checkpoint, device=args.device)
        write_headvis(bundle.model, s, Path(args.headvis), bundle.tokenizer, model_name=str(args.checkpoint))
        cfg, took = bundle.model.config, time.perf_counter() - started
        print(
            f"wrote HeadVis data for {cfg.n_layer * cfg.n_head} heads to {args.headvis} in {took:.1f} s "
            f"({1 + took / max(s.summary['seconds'], 1e-9):.2f}x the scan's time)"
        )
    sm = s.summary
    if "transcoders" in sm:
        print(f"read the transcoders of layers {sm['transcoders']['layers']}: {len(s.transcoder_features):,} contexts")
    write_progress(args.progress_file, done=sm["windows"], total=sm["windows"], state="done", out=str(args.out))
    print(
        f"scanned {sm['docs']:,} document(s), {sm['windows']:,} windows, {sm['tokens']:,} tokens in "
        f"{sm['seconds']:.1f} s ({sm['engine']}): mean loss {sm['loss']:.4f} nats; wrote {args.out}"
    )
