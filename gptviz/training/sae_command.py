"""`python -m gptviz sae train`: train an SAE on a checkpoint's activations, with a progress bar,
and write it in SAELens's format."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from .. import cli_args


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="sae_command", required=True)
    t = sub.add_parser("train", help="train a TopK SAE on one point of a checkpoint, over a corpus")
    path = cli_args.path
    t.add_argument("--checkpoint", required=True, type=path, help="checkpoint directory or file")
    t.add_argument("--data", required=True, type=path, help=".txt file, folder of .txt files, .jsonl or .parquet")
    t.add_argument("--site", required=True, help="the point it reads, e.g. blocks.2.resid_post")
    t.add_argument("--out", required=True, type=path, help="folder for cfg.json + sae_weights.safetensors")
    add_training_arguments(t, "SAE")


def add_training_arguments(t, what: str) -> None:
    """The options every trainer of features shares (train_sae's and train_transcoders')."""
    t.add_argument("--width", type=cli_args.whole(1, 256), default=8, help="features per input dimension (default 8)")
    t.add_argument("--k", type=cli_args.whole(1), default=32, help="features firing per token (default 32)")
    t.add_argument("--steps", type=cli_args.whole(1), help=f"{what} steps of 1,024 tokens (default: from the corpus)")
    t.add_argument("--lr", type=cli_args.number(0, above=True), default=1e-3, help="Adam's learning rate")
    t.add_argument("--seed", type=cli_args.whole(0), default=0)
    t.add_argument(
        "--engine", choices=("local", "ray"), default="local", help="where the model runs: local (default) or ray"
    )
    t.add_argument("--ray-address", help="a Ray cluster to use (default: $RAY_ADDRESS, else a Ray started here)")
    t.add_argument(
        "--ray-timeout",
        type=cli_args.number(0, above=True),
        help="seconds to wait for the Ray cluster (default: $GPTVIZ_RAY_TIMEOUT, else 30)",
    )
    t.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps (default: cpu)")
    t.add_argument(
        "--threads",
        type=cli_args.whole(1),
        help="torch CPU threads, here and of each Ray worker with --engine ray (default: torch's own choice here, "
        "2 per Ray worker)",
    )


def training_options(args) -> dict:
    """add_training_arguments' values as the trainers' keyword arguments."""
    keys = ("width", "k", "steps", "engine", "lr", "seed", "device", "threads", "ray_address", "ray_timeout")
    return {key: getattr(args, key) for key in keys}


@contextlib.contextmanager
def progress_bar(desc: str) -> Iterator[Callable]:
    """A tqdm bar of steps on stderr, and the progress function that moves it."""
    from tqdm import tqdm

    bar = tqdm(total=0, unit="step", desc=desc, file=sys.stderr, disable=None)

    def progress(p) -> None:
        bar.total = p.total
        bar.n = p.done
        bar.refresh()

    try:
        yield progress
    finally:
        bar.close()


def run(args) -> None:
    from .sae import train_sae

    with progress_bar("sae") as progress:
        sae = train_sae(
            args.checkpoint, args.data, args.site, out=args.out, progress=progress, **training_options(args)
        )
    r = sae.report
    print(
        f"trained {sae} in {r.seconds:.1f} s ({r.engine}): {r.steps:,} steps, {r.tokens:,} tokens "
        f"({r.tokens_per_s:,.0f} tokens/s)\n"
        f"held-out: fraction of variance unexplained {r.fvu:.4f}, L0 {r.l0:.1f}, dead {100 * r.dead:.2f}% of features, "
        f"loss {r.loss:.4f} -> {r.spliced_loss:.4f} nats with the SAE spliced in ({r.loss_increase:+.4f})\n"
        f"wrote {args.out}"
    )
