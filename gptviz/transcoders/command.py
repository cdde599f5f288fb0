"""`python -m gptviz transcoders train | info`: train one transcoder per layer of a checkpoint (with a
progress bar, written in circuit-tracer's transcoder_set layout), or say what a transcoder folder
holds and, given the checkpoint and a corpus, how faithful its replacement model is."""

from __future__ import annotations

import argparse

from .. import cli_args
from ..training.sae_command import add_training_arguments, progress_bar, training_options


def _layers(text: str) -> list[int]:
    try:
        out = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer numbers such as 0,1,2, got {text[:40]!r}") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"expected layer numbers (0 or more) such as 0,1,2, got {text[:40]!r}")
    return out


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="transcoders_command", required=True)
    path = cli_args.path
    t = sub.add_parser("train", help="train a TopK transcoder for each layer's MLP of a checkpoint, over a corpus")
    t.add_argument("--checkpoint", required=True, type=path, help="checkpoint directory or file")
    t.add_argument("--data", required=True, type=path, help=".txt file, folder of .txt files, .jsonl or .parquet")
    t.add_argument("--out", required=True, type=path, help="folder for config.yaml + layer_{l}.safetensors")
    t.add_argument("--layers", type=_layers, help="which layers, e.g. 0,1 (default: every layer)")
    add_training_arguments(t, "training")
    i = sub.add_parser("info", help="what a transcoder folder holds; with --checkpoint and --data, its fidelity")
    i.add_argument("path", type=path, help="a transcoder_set folder (config.yaml) or a Gemma Scope params file")
    i.add_argument("--checkpoint", type=path, help="the model they replace MLPs of: checks they fit")
    i.add_argument("--data", type=path, help="a corpus to measure the replacement model's fidelity on")
    i.add_argument("--max-tokens", type=cli_args.whole(1), default=16384, help="tokens of --data read (16,384)")


def fidelity_lines(f: dict) -> list[str]:
    """The fidelity dict as lines for a terminal (and the checkpoint card)."""
    per_layer = ", ".join(f"{l}: {v:.3f}" for l, v in f["nmse"].items())
    dead = ", ".join(f"{l}: {100 * v:.1f}%" for l, v in f["dead"].items())
    lines = [
        f"replacement model on {f['tokens']:,} tokens: top-1 agreement {100 * f['top1_agreement']:.1f}%, "
        f"KL {f['kl']:.4f} nats/token, loss {f['loss']:.4f} -> {f['replacement_loss']:.4f} nats",
        f"NMSE per layer {per_layer}; dead features {dead}",
    ]
    if f.get("warning"):
        lines.append(f"warning: {f['warning']}")
    return lines


def _train(args) -> None:
    from .training import train_transcoders

    with progress_bar("transcoders") as progress:
        tcs = train_transcoders(
            args.checkpoint, args.data, layers=args.layers, out=args.out, progress=progress, **training_options(args)
        )
    r = tcs[tcs.layers[0]].report
    print(
        f"trained {tcs} in {r.seconds:.1f} s, {r.cpu_seconds:.1f} s of CPU ({r.engine}): {r.steps:,} steps, "
        f"{r.tokens:,} tokens "
        f"({r.tokens_per_s:,.0f} tokens/s)"
    )
    for l in tcs.layers:
        rep = tcs[l].report
        print(f"layer {l}: held-out FVU {rep.fvu:.4f}, L0 {rep.l0:.1f}, dead {100 * rep.dead:.2f}% of features")
    print("\n".join(fidelity_lines(tcs.meta["gptviz_training"]["held_out_fidelity"])))
    print(f"wrote {args.out}")


def _info(args) -> None:
    from .errors import TranscoderError
    from .files import load_transcoders

    tcs = load_transcoders(args.path)
    first = tcs[tcs.layers[0]]
    k = f", k = {first.k}" if first.k else ""
    skip = ", with a skip connection" if first.W_skip is not None else ""
    print(f"{args.path}: {len(tcs)} transcoders for layers {', '.join(map(str, tcs.layers))}")
    print(f"{first.activation}{k}, d_model = {tcs.d_model}, d_tc = {first.d_tc}{skip}")
    print(f"reads {tcs.input_hook} (blocks.{{l}}.mlp.in), writes {tcs.output_hook} (blocks.{{l}}.mlp.out)")
    trained = tcs.meta.get("gptviz_training")
    if isinstance(trained, dict) and isinstance(trained.get("held_out_fidelity"), dict):
        print("as trained, on held-out text:")
        print("\n".join(fidelity_lines(trained["held_out_fidelity"])))
    if args.checkpoint is None:
        if args.data is not None:
            raise TranscoderError("--data needs --checkpoint, the model whose MLPs the transcoders replace")
        return
    from ..formats import load

    bundle = load(args.checkpoint)
    tcs.check_fits(bundle.model)
    print(f"they fit {args.checkpoint}")
    if args.data is not None:
        f = tcs.fidelity(bundle, args.data, max_tokens=args.max_tokens)
        print("\n".join(fidelity_lines(f)))


def run(args) -> None:
    if args.transcoders_command == "train":
        _train(args)
    else:
        _info(args)
