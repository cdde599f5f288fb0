"""`gptviz COMMAND`: capture a Trace to .npz, or print a checkpoint's card.

Every error gptviz raises on purpose prints one line to stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np
import pandas as pd

from . import cli_args
from .analysis import shape_table
from .capture import trace
from .errors import GptvizError, OutputError, PromptError
from .formats import load
from .progress import terminal_bar
from .threads import use_threads
from .tokenizers import encode_prompt, parse_ids


def prompt_ids(bundle, args) -> list[int]:
    if args.token_ids is not None:
        return parse_ids(args.token_ids, bundle.model.config.vocab_size, what="--token-ids")
    if bundle.tokenizer is None:
        raise PromptError(f"{bundle.report.path} has no tokenizer, so text cannot be encoded; use --token-ids")
    return encode_prompt(bundle.tokenizer, args.prompt, bundle.model.config.block_size)


def load_checkpoint(args):
    """The checkpoint a command names, with a bar for the load (on a terminal, or with --progress)."""
    bar = terminal_bar("loading", always=args.progress)
    return load(args.checkpoint, device=args.device, dtype=args.dtype, progress=bar)


def run_prompt(args, bundle, ids):
    """gptviz.trace of the prompt, with a bar of the blocks run (on a terminal, or with --progress)."""
    return trace(bundle.model, ids, bundle.tokenizer, progress=terminal_bar("running", always=args.progress))


def cmd_trace(args) -> None:
    bundle = load_checkpoint(args)
    t = run_prompt(args, bundle, prompt_ids(bundle, args))
    buffer = io.BytesIO()
    t.to_npz(buffer)
    write_file(Path(args.out), buffer.getbuffer())
    print(f"wrote {len(t)} tensors for {t.n_tokens} tokens ({t.nbytes / 2**20:.1f} MiB captured) to {args.out}")


def cmd_patch(args) -> None:
    from .analysis.patching import one_token, patching_sweep, sweep_table

    bundle = load_checkpoint(args)
    tok, V, block = bundle.tokenizer, bundle.model.config.vocab_size, bundle.model.config.block_size
    if args.ids:  # every argument is token ids: for checkpoints without a tokenizer
        clean, corrupt = (parse_ids(x, V, what=w) for x, w in ((args.clean, "--clean"), (args.corrupt, "--corrupt")))
        answer, wrong = (parse_ids(x, V, what=w) for x, w in ((args.answer, "--answer"), (args.wrong, "--wrong")))
        if len(answer) != 1 or len(wrong) != 1:
            raise PromptError("--answer and --wrong are one token id each")
        answer, wrong = answer[0], wrong[0]
    else:
        if tok is None:
            raise PromptError(f"{bundle.report.path} has no tokenizer, so text cannot be encoded; use --ids")
        clean, corrupt = encode_prompt(tok, args.clean, block), encode_prompt(tok, args.corrupt, block)
        answer, wrong = one_token(tok, args.answer, "answer"), one_token(tok, args.wrong, "wrong")
    bar = terminal_bar(f"patching {args.site}", always=args.progress)
    sweep = patching_sweep(bundle.model, clean, corrupt, answer, wrong, site=args.site, progress=bar)
    out = Path(args.out)
    labels = tok.display(clean) if tok is not None else [str(i) for i in clean]
    if out.suffix == ".npz":
        buffer = io.BytesIO()
        np.savez(buffer, sweep=sweep, site=args.site, clean_ids=clean, corrupt_ids=corrupt, answer=answer, wrong=wrong)
        write_file(out, buffer.getbuffer())
    else:
        write_file(out, sweep_table(sweep, args.site, labels).to_csv(index=False).encode())
    L, n = sweep.shape
    print(
        f"wrote the {args.site} sweep ({L} layers x {n} {'heads' if args.site == 'attn.z' else 'positions'}) to "
        f"{args.out}: (patched - corrupt) / (clean - corrupt) of logit(answer) - logit(wrong) at the last position"
    )


def write_file(path: Path, data) -> None:
    """Write data to exactly path; a failure (a full disk, /dev/full, a missing folder) is an OutputError.
    The whole file is written and closed inside the try: a full disk often shows only at flush or close."""
    existed = path.exists()
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
    except OSError as e:
        if not existed and path.is_file():
            path.unlink(missing_ok=True)  # no half-written file left behind to be mistaken for a result
        raise OutputError(f"{path}: cannot be written ({e.strerror or e}); choose another --out") from None


def table(rows) -> str:
    """Two columns, the names padded to the longest and each value as it is: a long value (a load
    warning) takes its own width on its own line instead of widening every row to it."""
    rows = [(str(k), str(v)) for k, v in rows]
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {v}".rstrip() for k, v in rows)


def cmd_info(args) -> None:
    bundle = load_checkpoint(args)
    cfg = bundle.model.config
    print("== model card")
    special = [("special", "; ".join(cfg.special()))] if cfg.special() else []
    print(table([*cfg.card_dict().items(), *special, *bundle.card.items()]))
    print("\n== load report")
    print(table(bundle.report.as_rows()))
    ids = prompt_ids(bundle, args) if (args.prompt or args.token_ids) else [0] * min(8, cfg.block_size)
    t = run_prompt(args, bundle, ids)
    print(
        f"\n== shape trace (B=1, T={t.n_tokens}, C={cfg.n_embd}, H={cfg.n_head}, D={cfg.head_dim}, V={cfg.vocab_size})"
    )
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(shape_table(t).to_string())


PROGRESS_HELP = "draw the progress bar on stderr even when it is not a terminal (a log file, CI)"

CHECK_TEXT = "First Citizen: Before we proceed any further, hear me speak. All: Speak, speak."


# Which findings `check` treats as failures, for its --help and the README (gptviz.analysis.health
# decides each finding's status; these lists only name them for a person).
CHECK_FAILS = (
    "NaN/Inf weights or activations, attention rows that do not sum to 1, a tokenizer with more ids than the model"
)
CHECK_WARNS = (
    "residual-norm growth, collapsed, uniform or sink heads, an attention logit above 100, "
    "untrained embedding rows, ids the tokenizer never produces"
)
CHECK_EPILOG = (
    f"Exit status: 1 when a finding fails ({CHECK_FAILS}); a warning ({CHECK_WARNS}) exits 0 "
    "unless --strict is given, which fails on warnings too. 0 when nothing fails; 2 when the checkpoint "
    "or prompt cannot be used."
)


def cmd_check(args) -> int:
    """One line per health finding (or JSON); exit 1 when any finding fails (or, with --strict, warns),
    so a pipeline can gate."""
    import json

    from .analysis.health import health, worst

    bundle = load_checkpoint(args)
    cfg = bundle.model.config
    if args.prompt is not None or args.token_ids is not None:
        ids = prompt_ids(bundle, args)
    else:  # a fixed prompt: the checkpoint's own text if its tokenizer knows it, else spread-out ids
        tok = bundle.tokenizer
        ids = encode_prompt(tok, CHECK_TEXT, cfg.block_size, "drop", keep_last=True) if tok else []
        ids = ids if len(ids) > 1 else [(i * 7919) % cfg.vocab_size for i in range(min(32, cfg.block_size))]
    findings = health(bundle.model, run_prompt(args, bundle, ids), bundle.tokenizer)
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2))
    else:
        print("\n".join(str(f) for f in findings))
    return 1 if worst(findings) in (("warn", "fail") if args.strict else ("fail",)) else 0


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
    "runner.postScriptGC": "false",
}


def app_file() -> Path:
    """The dashboard's entry script: gptviz/_app/app.py in an installed package, app.py in a checkout."""
    here = Path(__file__).resolve().parent
    installed = here / "_app" / "app.py"
    return installed if installed.is_file() else here.parent / "app.py"


def dashboard_checkpoint(choice: str) -> str:
    """--checkpoint for the dashboard: a path that exists (made absolute: the server may resolve it
    elsewhere), a shipped checkpoint's name, or "demo"; anything else is a PromptError now, not a
    red box in the browser later."""
    from .dashboard.sources.checkpoints import DEMO, shipped
    from .formats.safe import user_path

    path = user_path(choice)  # a NUL byte: one line, not a ValueError from exists()
    if path.exists():
        return str(path.resolve())
    if choice == DEMO or choice in shipped():
        return choice
    raise PromptError(f"--checkpoint {choice}: no such file or folder, nor a shipped checkpoint's name")


def cmd_dashboard(args) -> int:
    if args.checkpoint is not None:  # the page opens on it; the sidebar can still switch
        from .dashboard.sources.checkpoints import DEFAULT_ENV

        os.environ[DEFAULT_ENV] = dashboard_checkpoint(args.checkpoint)
    if args.class_mode:  # the server inherits it: paths closed, uploads and scans off (dashboard/classmode.py)
        os.environ["GPTVIZ_CLASS"] = "1"
        from .dashboard.classroom import voters  # the teacher's own link starts a class however full the server is

        key = voters.reserved_key() or voters.new_teacher_key()
        os.environ[voters.TEACHER_KEY_ENV] = key
        print(f"teacher's link (keep it to yourself): http://{args.address}:{args.port}/?teach={key}", flush=True)
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


def cmd_scan(args) -> None:
    from .scanning.command import run

    if args.transcoders is not None:  # read here: the scan takes a set, and scanning sits below transcoders
        from .transcoders import load_transcoders

        args.transcoders = load_transcoders(args.transcoders)
    run(args)


def cmd_sae(args) -> None:
    from .training.sae_command import run

    run(args)


def cmd_transcoders(args) -> None:
    from .transcoders.command import run

    run(args)


def cmd_bench(args) -> None:
    from .bench.command import run

    run(args)


def cmd_handout(args) -> None:
    from .dashboard.sources.checkpoints import checkpoints_dir
    from .lessons import handout, read_lesson, shipped_lesson, shipped_lessons

    lesson = shipped_lesson(args.lesson) if args.lesson in shipped_lessons() else read_lesson(args.lesson)
    root = Path(args.checkpoints) if args.checkpoints else checkpoints_dir()
    out = handout.write(lesson, handout.local_runs(root), args.out)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB, {len(lesson.slides)} slides)")
    if args.pdf:
        from .lessons import pdf

        printed = pdf.print_pdf(out, args.pdf)
        print(f"wrote {printed} ({pdf.pages(printed)} pages)")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line too, like every other error (status 2)."""

    def error(self, message: str):
        self.exit(2, f"error: {one_line(message)} (see {self.prog} --help)\n")


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gptviz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def with_checkpoint(p):
        p.add_argument("--checkpoint", required=True, type=cli_args.path, help="checkpoint directory or file")
        p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps (default: cpu)")
        p.add_argument(
            "--dtype",
            default="auto",
            choices=("auto", "float32", "bfloat16", "float16"),
            help="what the model computes in (default: auto, float32 unless it does not fit the free memory)",
        )
        p.add_argument("--threads", type=cli_args.whole(1), help=cli_args.THREADS_HELP)
        p.add_argument("--progress", action="store_true", help=PROGRESS_HELP)
        return p

    p = with_checkpoint(sub.add_parser("trace", help="run one prompt and write its Trace to .npz"))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", type=cli_args.text, help="text to encode with the checkpoint's tokenizer")
    src.add_argument("--token-ids", type=cli_args.text, help="comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--out", required=True, type=cli_args.path, help="where to write the .npz (exactly this path)")
    p.set_defaults(func=cmd_trace)

    p = with_checkpoint(sub.add_parser("info", help="print the model card, load report and shape trace"))
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=cli_args.text, help="prompt for the shape trace (default: 8 tokens of id 0)")
    src.add_argument("--token-ids", type=cli_args.text, help="comma-separated token ids for the shape trace")
    p.set_defaults(func=cmd_info)

    p = with_checkpoint(
        sub.add_parser(
            "check",
            help="health checks; exit 1 if any fails (--strict: or warns), so a pipeline can gate",
            epilog=CHECK_EPILOG,
        )
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", type=cli_args.text, help="text to run the checks on (default: a fixed line of text)")
    src.add_argument("--token-ids", type=cli_args.text, help="comma-separated token ids to run the checks on")
    p.add_argument("--json", action="store_true", help="print the findings as JSON instead of one line each")
    p.add_argument("--strict", action="store_true", help="exit 1 on a warning too, not only on a failure")
    p.set_defaults(func=cmd_check)

    p = with_checkpoint(sub.add_parser("patch", help="activation patching sweep from a corrupt prompt to a clean one"))
    text = cli_args.text  # prompts and tokens: valid UTF-8, checked before the tokenizer sees them
    p.add_argument("--clean", required=True, type=text, help="the prompt whose values are patched in")
    p.add_argument("--corrupt", required=True, type=text, help="the prompt that is run, of the same length in tokens")
    p.add_argument("--answer", required=True, type=text, help="the token the clean prompt should predict next")
    p.add_argument("--wrong", required=True, type=text, help="the token the corrupt prompt should predict instead")
    p.add_argument("--site", default="resid_pre", choices=("resid_pre", "attn.z", "mlp.out"))
    p.add_argument("--ids", action="store_true", help="--clean/--corrupt/--answer/--wrong are token ids")
    p.add_argument(
        "--out", required=True, type=cli_args.path, help="where to write it: .csv (one row per cell) or .npz"
    )
    p.set_defaults(func=cmd_patch)

    p = sub.add_parser("train", help="train a model on a text corpus and write a native checkpoint")
    from .training.train_args import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("dashboard", help="start the dashboard in Streamlit")
    p.add_argument("--port", type=cli_args.PORT, default=8501, help="TCP port, 1-65535 (default: 8501)")
    p.add_argument("--address", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument(
        "--class",
        dest="class_mode",
        action="store_true",
        help="a class server: no path typed in a page reaches this machine's disk beyond the shipped items and "
        "$GPTVIZ_DATA_ROOTS; uploads and scans off (on by default for any --address but loopback)",
    )
    p.add_argument(
        "--checkpoint",
        type=cli_args.path,
        help="the checkpoint the dashboard opens on: a path, or a shipped name (default: "
        "$GPTVIZ_DEFAULT_CHECKPOINT, else the shipped shakespeare-char, else a random-weight demo)",
    )
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("scan", help="run a corpus through the model: loss, head scores, neurons' top contexts")
    from .scanning.command import add_arguments as scan_arguments

    scan_arguments(p)
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser("sae", help="sparse autoencoders: train one on a checkpoint's activations")
    from .training.sae_command import add_arguments as sae_arguments

    sae_arguments(p)
    p.set_defaults(func=cmd_sae)

    p = sub.add_parser("transcoders", help="transcoders: train one per layer's MLP, or say what a set holds")
    from .transcoders.command import add_arguments as transcoder_arguments

    transcoder_arguments(p)
    p.set_defaults(func=cmd_transcoders)

    p = sub.add_parser("bench", help="time and size capture against a plain forward pass (and peers)")
    from .bench.command import add_arguments as bench_arguments

    bench_arguments(p)
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("handout", help="write a lesson as one HTML file that opens without a server")
    p.add_argument(
        "--lesson", required=True, type=cli_args.path, help="a shipped lesson's name, or the path of a lesson .toml"
    )
    p.add_argument("--out", required=True, type=cli_args.path, help="where to write the .html (exactly this path)")
    p.add_argument(
        "--checkpoints",
        type=cli_args.path,
        help="folder of the checkpoints its slides name (default: the shipped ones)",
    )
    p.add_argument(
        "--pdf", type=cli_args.path, help="also print it to this PDF, a slide a page (needs Chromium or Chrome)"
    )
    p.set_defaults(func=cmd_handout)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the train command records the command line in its model card
    try:
        use_threads(getattr(args, "threads", None))
        status = args.func(args)
    except (GptvizError, OSError) as e:  # OSError: e.g. a file the training corpus names is missing
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("error: not enough memory for this command", file=sys.stderr)
        return 2
    except Exception as e:  # a bug of ours: still one line, never a traceback, but say it is one
        if os.environ.get("GPTVIZ_TRACEBACK"):  # for the report: where it happened
            traceback.print_exc()
        print(
            f"error: unexpected {type(e).__name__}: {one_line(e)[:300]}; please report this "
            "(GPTVIZ_TRACEBACK=1 shows where)",
            file=sys.stderr,
        )
        return 2
    return status if isinstance(status, int) else 0
