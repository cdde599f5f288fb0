"""`gptviz bench`: its flags, which benchmark they choose, and what that benchmark needs.

The benchmarks of the dashboard itself (BROWSER_BENCHES) serve a checkout's app.py and checkpoints/ and
drive Chromium through Playwright, one of the test extras; an installed wheel has neither the checkout
nor, often, Playwright, so they say so in one line. Any other benchmark that needs a package this
install lacks (transformers, TransformerLens, Ray) says which, in one line too."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

from .. import cli_args
from ..errors import GptvizError

BENCHES = (
    "why",
    "scan",
    "families",
    "llama",
    "patching",
    "generate",
    "lessons",
    "features",
    "load",
    "trace_memory",
    "graph",
    "figures",
)
# The benchmarks of the dashboard itself: a server driven by Chromium and simulated students
BROWSER_BENCHES = ("dashboard", "sessions", "classroom")
CHECKOUT = Path(__file__).resolve().parents[2]  # where a checkout keeps app.py, checkpoints/ and tests/


class MissingError(GptvizError):
    """A benchmark needs a package or a checkout this install lacks."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The bench command's flags: which benchmark, and each one's options."""
    p.add_argument("--peers", action="store_true", help="also run Hugging Face transformers on the same weights")
    p.add_argument("--tiny", action="store_true", help="a tiny model instead of GPT-2 small (proves the bench runs)")
    p.add_argument(
        "--lengths", type=cli_args.whole_list(1), help="comma-separated prompt lengths T (default: 64,256,1024)"
    )
    p.add_argument(
        "--repeats", type=cli_args.whole(1), default=5, help="timed runs per contender and T (median is reported)"
    )
    p.add_argument("--threads", type=cli_args.whole(1), help=cli_args.THREADS_HELP)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps (default: cpu)")
    p.add_argument("--json", type=cli_args.path, help="also write the results to this JSON file")
    p.add_argument("--why", action="store_true", help="head scores and the logit lens at T = 1024 against their floors")
    p.add_argument("--scan", action="store_true", help="the corpus scan against a plain forward; the Ray engine")
    p.add_argument(
        "--parts",
        help="with --scan: any of speed,memory,ray,threads,cluster (default: speed,memory,ray); "
        "with --load: any of load,numbers,bf16,reference,speed",
    )
    p.add_argument(
        "--checkpoint",
        type=cli_args.path,
        help="with --scan --parts threads or cluster: time this model's scan; with --load: its shards",
    )
    p.add_argument(
        "--burners", type=cli_args.whole(0), default=0, help="with --scan --parts threads: busy-looping processes"
    )
    p.add_argument("--ray-windows", type=int, default=512, help="with --scan: windows of the Ray comparison")
    p.add_argument("--mem-windows", type=int, default=64, help="with --scan: peak memory of N against 3N windows")
    p.add_argument(
        "--families",
        action="store_true",
        help="a SmolLM2-135M-shaped Llama against transformers' LlamaForCausalLM: forward, capture, generate",
    )
    p.add_argument("--patching", action="store_true", help="patching_sweep against the naive loop (--peers: and TL)")
    p.add_argument("--generate", action="store_true", help="decoding with per-step capture against HF's generate")
    p.add_argument(
        "--load", action="store_true", help="loading a Llama-3.2-1B-shaped bf16 checkpoint against HF's from_pretrained"
    )
    p.add_argument(
        "--figures", action="store_true", help="the layer x head grid and heads figures built and sent, vs a forward"
    )
    p.add_argument("--graph", action="store_true", help="attribution graphs at T = 32 against a forward (135M shape)")
    p.add_argument(
        "--llama",
        action="store_true",
        help="a Llama shape in bf16 on --device against HF: forward, trace, ops and kernels per T; decoding; patching",
    )
    p.add_argument(
        "--shape",
        choices=("1b", "8b", "narrow"),
        help="with --load: Llama-3.2-1B (default) or Llama-3.1-8B; with --llama: those or 16 layers of width 64",
    )
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="with --llama: (default: bfloat16)")
    p.add_argument("--peak-tflops", type=float, help="with --llama: the device's matrix peak, for a share of it")
    p.add_argument("--peak-tbps", type=float, help="with --llama: the device's memory bandwidth in TB/s")
    p.add_argument("--lessons", action="store_true", help="hostile 64 KB lesson files: bounded parse against tomllib")
    p.add_argument("--features", action="store_true", help="steering_sweep and a scan with the shipped SAE")
    p.add_argument("--trace-memory", action="store_true", help="a 1B-shaped Llama's Trace bytes at T = 1,024")
    p.add_argument("--pages", action="store_true", help="with --trace-memory: the run each dashboard page keeps")
    p.add_argument(
        "--T",
        type=cli_args.whole_list(1),
        help="with --patching: prompt lengths (default: 32,64); with --load: of the numbers and speed; "
        "with --llama: of the patching sweep (default: 32)",
    )
    p.add_argument("--naive-layers", type=cli_args.whole(1), help="with --patching: time the naive loop on N layers")
    p.add_argument(
        "--corrupt-at", type=cli_args.whole(0), help="with --patching: the position the prompts differ at (default T/2)"
    )
    p.add_argument("--tl-layers", type=cli_args.whole(1), help="with --patching: TransformerLens's sweep on N layers")
    p.add_argument(
        "--dashboard", action="store_true", help="the dashboard in Chromium: Enter -> heatmap, every page at T = 1,024"
    )
    p.add_argument("--sessions", action="store_true", help="1, 4, 8 browser sessions on one server; its memory")
    p.add_argument("--classroom", action="store_true", help="a class of 30 simulated students following a teacher")
    p.add_argument(
        "options",
        nargs="*",
        help="after --: the options of --dashboard, --sessions or --classroom (-- --help lists them)",
    )
    p.add_argument("--prompt-tokens", type=cli_args.whole(1), default=32, help="with --generate: prompt tokens")
    p.add_argument("--new-tokens", type=cli_args.whole(1), default=128, help="with --generate: new tokens")


def installed(package: str) -> bool:
    """Whether `package` can be imported here (a None in sys.modules blocks an import: it is not)."""
    if package in sys.modules:
        return sys.modules[package] is not None
    return importlib.util.find_spec(package) is not None


def browser_needs(name: str) -> str | None:
    """What a dashboard benchmark needs and this install lacks, said in one line; None when nothing."""
    missing = []
    if not installed("playwright"):
        missing.append("Playwright (pip install 'gptviz[test]'; Chromium from `make browser`)")
    if not (CHECKOUT / "app.py").is_file() or not (CHECKOUT / "tests").is_dir():
        missing.append("a git checkout of gptviz (it serves the checkout's app.py and checkpoints/)")
    if not missing:
        return None
    return f"gptviz bench --{name} drives the dashboard in Chromium and needs {' and '.join(missing)}"


def run(args: argparse.Namespace) -> None:
    """Run the benchmark the flags choose (forward when none)."""
    chosen = [name for name in BENCHES + BROWSER_BENCHES if getattr(args, name)]
    if len(chosen) > 1:
        raise SystemExit(f"error: choose one benchmark, not {' and '.join('--' + c for c in chosen)}")
    name = chosen[0] if chosen else "forward"
    if name in BROWSER_BENCHES and (lacking := browser_needs(name)):
        raise MissingError(lacking)
    if name not in BROWSER_BENCHES and args.options:
        raise SystemExit(f"error: only {', '.join('--' + b for b in BROWSER_BENCHES)} take options after --")
    try:
        module = importlib.import_module(f"{__package__}.{name}")
        if name in BROWSER_BENCHES:
            module.main(args.options)  # they drive a dashboard server in Chromium, with options of their own
        else:
            module.main(args)
    except ModuleNotFoundError as e:
        if not e.name or e.name.split(".")[0] == "gptviz":
            raise  # one of ours missing is a bug, not a missing extra
        flag = f" --{name.replace('_', '-')}" if chosen else ""
        raise MissingError(
            f"gptviz bench{flag} needs the package {e.name!r}, which is not installed here (pip install 'gptviz[test]')"
        ) from e
