"""`python -m gptviz COMMAND`: capture a Trace to .npz, or print a checkpoint's card.

Every error gptviz raises on purpose prints one line to stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from .analysis import shape_table
from .capture import trace
from .errors import GptvizError, PromptError
from .formats import load
from .tokenizers import encode_prompt, parse_ids


def prompt_ids(bundle, args) -> list[int]:
    if args.token_ids is not None:
        return parse_ids(args.token_ids, bundle.model.config.vocab_size, what="--token-ids")
    if bundle.tokenizer is None:
        raise PromptError(f"{bundle.report.path} has no tokenizer, so text cannot be encoded; use --token-ids")
    return encode_prompt(bundle.tokenizer, args.prompt, bundle.model.config.block_size)


def cmd_trace(args) -> None:
    bundle = load(args.checkpoint, device=args.device)
    t = trace(bundle.model, prompt_ids(bundle, args), bundle.tokenizer)
    t.to_npz(args.out)
    print(f"wrote {len(t)} tensors for {t.n_tokens} tokens ({t.nbytes / 2**20:.1f} MiB captured) to {args.out}")


def table(rows) -> str:
    return pd.DataFrame(rows, columns=["", ""]).to_string(index=False, header=False)


def cmd_info(args) -> None:
    bundle = load(args.checkpoint, device=args.device)
    cfg = bundle.model.config
    print("== model card")
    print(table([(k, v) for k, v in cfg.to_dict().items()] + [(k, v) for k, v in bundle.card.items()]))
    print("\n== load report")
    print(table(bundle.report.as_rows()))
    ids = prompt_ids(bundle, args) if (args.prompt or args.token_ids) else [0] * min(8, cfg.block_size)
    t = trace(bundle.model, ids, bundle.tokenizer)
    print(
        f"\n== shape trace (B=1, T={t.n_tokens}, C={cfg.n_embd}, H={cfg.n_head}, D={cfg.head_dim}, V={cfg.vocab_size})"
    )
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(shape_table(t).to_string())


CHECK_TEXT = "First Citizen: Before we proceed any further, hear me speak. All: Speak, speak."


def cmd_check(args) -> int:
    """One line per health finding (or JSON); exit 1 when any finding fails, so a pipeline can gate."""
    import json

    from .analysis.health import health, worst

    bundle = load(args.checkpoint, device=args.device)
    cfg = bundle.model.config
    if args.prompt is not None or args.token_ids is not None:
        ids = prompt_ids(bundle, args)
    else:  # a fixed prompt: the checkpoint's own text if its tokenizer knows it, else spread-out ids
        tok = bundle.tokenizer
        ids = encode_prompt(tok, CHECK_TEXT, cfg.block_size, "drop", keep_last=True) if tok else []
        ids = ids if len(ids) > 1 else [(i * 7919) % cfg.vocab_size for i in range(min(32, cfg.block_size))]
    findings = health(bundle.model, trace(bundle.model, ids, bundle.tokenizer), bundle.tokenizer)
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        print("\n".join(str(f) for f in findings))
    return 1 if worst(findings) == "fail" else 0


def cmd_train(args) -> None:
    from .training.train import run

    run(args, args.argv)


# What .streamlit/config.toml sets for `streamlit run app.py` in the checkout; an installed
# package has no such file beside the user's working folder, so the flags say it.
STREAMLIT_FLAGS = {
    "server.headless": "true",
    "browser.gatherUsageStats": "false",
    "client.toolbarMode": "viewer",
    "client.showErrorDetails": "none",
}


def app_file() -> Path:
    """The dashboard's entry script: gptviz/_app/app.py in an installed package, app.py in a checkout."""
    here = Path(__file__).resolve().parent
    installed = here / "_app" / "app.py"
    return installed if installed.is_file() else here.parent / "app.py"


def cmd_dashboard(args) -> int:
    flags = {**STREAMLIT_FLAGS, "server.address": args.address, "server.port": str(args.port)}
    cmd = [sys.executable, "-m", "streamlit", "run", str(app_file())]
    cmd += [part for k, v in flags.items() for part in (f"--{k}", v)]
    print(f"gptviz dashboard on http://{args.address}:{args.port} (Ctrl+C stops it)", flush=True)
    if os.name == "posix":  # become the server: a SIGTERM (service manager, `timeout`) must stop Streamlit too
        os.execv(sys.executable, cmd)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 0


def cmd_bench(args) -> None:
    from .bench import main as bench

    bench(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gptviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_checkpoint(p):
        p.add_argument("--checkpoint", required=True, help="checkpoint directory or file")
        p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps (default: cpu)")
        return p

    p = with_checkpoint(sub.add_parser("trace", help="run one prompt and write its Trace to .npz"))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="text to encode with the checkpoint's tokenizer")
    src.add_argument("--token-ids", help="comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--out", required=True, help="where to write the .npz")
    p.set_defaults(func=cmd_trace)

    p = with_checkpoint(sub.add_parser("info", help="print the model card, load report and shape trace"))
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt for the shape trace (default: 8 tokens of id 0)")
    src.add_argument("--token-ids", help="comma-separated token ids for the shape trace")
    p.set_defaults(func=cmd_info)

    p = with_checkpoint(sub.add_parser("check", help="health checks; exit 1 if any fails, so a pipeline can gate"))
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="text to run the checks on (default: a fixed line of text)")
    src.add_argument("--token-ids", help="comma-separated token ids to run the checks on")
    p.add_argument("--json", action="store_true", help="print the findings as JSON instead of one line each")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("train", help="train a model on a text corpus and write a native checkpoint")
    from .training.train import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("dashboard", help="start the dashboard in Streamlit")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("bench", help="time and size capture against a plain forward pass (and peers)")
    p.add_argument("--peers", action="store_true", help="also run Hugging Face transformers on the same weights")
    p.add_argument("--tiny", action="store_true", help="a tiny model instead of GPT-2 small (proves the bench runs)")
    p.add_argument("--lengths", help="comma-separated prompt lengths T (default: 64,256,1024)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per contender and T (median is reported)")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps (default: cpu)")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the train command records the command line in its model card
    try:
        status = args.func(args)
    except (GptvizError, OSError) as e:  # OSError: e.g. --out in a folder that does not exist
        print(f"error: {e}", file=sys.stderr)
        return 2
    return status if isinstance(status, int) else 0
