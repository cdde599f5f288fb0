"""`python -m gptviz train`: train any model of the family on a text corpus, CPU or GPU.

The loop is nanoGPT's in miniature: random windows of the token stream, AdamW, linear warmup then
cosine decay, gradient clipping, a validation loss every --eval-interval steps. The best model by
validation loss is written as a native checkpoint each time it improves (so an interrupted run
still leaves one), and once more at the end with the final numbers in its model card: corpus,
steps, train/val loss, parameter count, training time and the command that made it. A loss curve
goes beside it as loss_curve.csv.

--max-minutes bounds the wall time of the whole run, the final evaluation included (its cost is
measured by the periodic evaluations and kept back): the cosine schedule then follows whichever
runs out first, steps or minutes, so a time-capped run still ends at a low learning rate.
"""

from __future__ import annotations

import argparse
import contextvars
import csv
import math
import platform
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import torch
import torch.nn.functional as F

from ..attention import _explicit
from ..config import GPTConfig
from ..errors import ConfigError
from ..formats import save
from ..formats.hf_llama_export import SPECIAL, refusal, save_hf_llama
from ..model import GPT
from ..tokenizers import BPETokenizer, CharTokenizer, Tokenizer
from .corpus import Corpus, load_corpus
from .train_args import model_fields


def lr_at(step: int, progress: float, args: argparse.Namespace) -> float:
    """Linear warmup over warmup_steps, then cosine from lr to min_lr as progress goes 0 -> 1."""
    if step < args.warmup_steps:
        return args.lr * (step + 1) / args.warmup_steps
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def batch(
    data: torch.Tensor, block: int, size: int, gen: torch.Generator, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` random windows of `block` tokens from data, and the same windows one token on (the targets)."""
    starts = torch.randint(len(data) - block - 1, (size,), generator=gen)
    x = torch.stack([data[s : s + block] for s in starts.tolist()]).long()  # (B, T)
    y = torch.stack([data[s + 1 : s + 1 + block] for s in starts.tolist()]).long()  # (B, T) next tokens
    return x.to(device), y.to(device)


def loss_of(model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of the model on inputs x [B, T] and targets y [B, T]."""
    logits = model(x)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


@torch.no_grad()
def eval_loss(model: GPT, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Mean loss over fixed batches, in eval mode (the model is put back in train mode after)."""
    model.eval()
    loss = sum(loss_of(model, x, y).item() for x, y in batches) / len(batches)
    model.train()
    return loss


@torch.no_grad()
def full_loss(
    model: GPT, data: torch.Tensor, block: int, batch_size: int, device: torch.device, max_windows: int | None = None
) -> tuple[float, int, int]:
    """Mean loss over every token of data, read as consecutive windows of block tokens; with
    max_windows, over that many windows spread evenly across data (a time budget that cannot hold
    them all). Returns (loss, windows used, windows in data)."""
    model.eval()
    n = (len(data) - 1) // block
    x_all = data[: n * block].view(n, block)
    y_all = data[1 : n * block + 1].view(n, block)
    if max_windows is not None and max_windows < n:
        keep = torch.linspace(0, n - 1, max(max_windows, 1)).round().long().unique()
        x_all, y_all = x_all[keep], y_all[keep]
    used = len(x_all)
    total = 0.0
    for i in range(0, used, batch_size):
        x, y = x_all[i : i + batch_size].long().to(device), y_all[i : i + batch_size].long().to(device)
        total += loss_of(model, x, y).item() * x.numel()
    return total / (used * block), used, n


@torch.no_grad()
def sample(
    model: GPT,
    tokenizer: Tokenizer,
    prompt: str,
    n: int = 300,
    temperature: float = 0.8,
    seed: int = 0,
    deadline: float = float("inf"),
) -> str:
    """The prompt and n tokens sampled after it (seeded, so a card's sample can be made again); fewer
    once time.time() passes deadline (a run's time budget), the same tokens as far as it goes."""
    model.eval()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    ids = tokenizer.encode(prompt, unknown="drop") or [0]
    for i in range(n):
        if i and time.time() >= deadline:
            break
        ctx = torch.tensor([ids[-model.config.block_size :]], device=model.device)
        probs = F.softmax(model(ctx)[0, -1].float().cpu() / temperature, dim=-1)
        ids.append(int(torch.multinomial(probs, 1, generator=gen)))
    return tokenizer.decode(ids)


def optimizer_for(model: GPT, args: argparse.Namespace) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices and embeddings only, not on biases and norm gains."""
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embeddings
    rest = [p for p in model.parameters() if p.dim() < 2]  # biases and norm gains
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.99))


def tokenized_corpus(
    args: argparse.Namespace,
) -> tuple[Corpus, CharTokenizer | BPETokenizer, torch.Tensor, torch.Tensor]:
    """The corpus, its tokenizer (the char set of the whole corpus, or a BPE trained on the train
    split only), and both splits as 1-D tensors of token ids."""
    corpus = load_corpus(args.corpus, Path(args.cache_dir), spelling=args.spelling)
    if args.tokenizer == "char":
        tokenizer = CharTokenizer.from_text(corpus.train + corpus.val)
    else:  # a Hugging Face directory gets one special token, its BOS / EOS (never in the training text)
        special = [SPECIAL] if getattr(args, "format", "gptviz") == "hf" else []
        tokenizer = BPETokenizer.train(corpus.train, args.bpe_vocab, special_tokens=special)
    dtype = torch.int16 if tokenizer.vocab_size < 2**15 else torch.int32
    train_data = torch.tensor(tokenizer.encode(corpus.train, unknown="drop"), dtype=dtype)
    val_data = torch.tensor(tokenizer.encode(corpus.val, unknown="drop"), dtype=dtype)
    return corpus, tokenizer, train_data, val_data


def train_step(
    model: GPT, opt: torch.optim.Optimizer, xy: tuple[torch.Tensor, torch.Tensor], args: argparse.Namespace
) -> float:
    """One optimiser step on one batch (gradients clipped to --grad-clip); returns its loss."""
    loss = loss_of(model, *xy)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if args.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    opt.step()
    return loss.item()


def run(args: argparse.Namespace, argv: list[str]) -> Path:
    """Train as args say and write the checkpoint; argv is recorded in the card as the command."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    started = time.time()
    fields_ = model_fields(args)
    write = writer(args, GPTConfig(**fields_))  # a wrong --format is said now, not after the training
    corpus, tokenizer, train_data, val_data = tokenized_corpus(args)
    chars_per_token = len(corpus.val) / len(val_data)
    config = GPTConfig(vocab_size=tokenizer.vocab_size, **fields_)
    model = GPT(config).to(device).train()
    if getattr(args, "no_causal_mask", False):
        without_causal_mask(model)
    opt = optimizer_for(model, args)
    gen = torch.Generator().manual_seed(args.seed)
    val_batches = [batch(val_data, config.block_size, args.batch_size, gen, device) for _ in range(args.eval_batches)]
    save_every = getattr(args, "save_every", 0)
    # Fixed train batches from their own generator: the snapshots' train loss is then comparable step to
    # step, and the training batches are the same as in a run without --save-every.
    gen_snap = torch.Generator().manual_seed(args.seed + 2)
    snap_batches = (
        [batch(train_data, config.block_size, args.batch_size, gen_snap, device) for _ in range(args.eval_batches)]
        if save_every
        else []
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "gptviz", *argv])
    print(
        f"{corpus.name}: {len(train_data):,} train / {len(val_data):,} val tokens ({tokenizer.kind}, "
        f"V={tokenizer.vocab_size}); model {model.num_params():,} parameters on {device}",
        flush=True,
    )

    with stop_on_signals() as stop:
        base_card = {
            **corpus.card(),
            "family": getattr(args, "family", "gpt2"),
            "tokenizer": tokenizer.kind,
            "chars_per_token": round(chars_per_token, 4),
            "command": command,
            "batch_size": args.batch_size,
            "lr": args.lr,
            "min_lr": args.min_lr,
            "warmup_steps": args.warmup_steps,
            "weight_decay": args.weight_decay,
            "seed": args.seed,
            "device": str(device),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "machine": platform.processor() or platform.machine(),
            "loss_curve": "loss_curve.csv",
        }
        if getattr(args, "preset_prompt", None):
            base_card["preset_prompt"] = args.preset_prompt
        if getattr(args, "no_causal_mask", False):
            base_card["causal_mask"] = "OFF in training (--no-causal-mask, a teaching mistake): it learned to peek"
        curve = [("step", "tokens_seen", "elapsed_s", "lr", "train_loss", "val_loss")]
        best = {"val": float("inf"), "step": 0, "state": None}
        t0 = time.time()
        # the budget covers the whole run from the start (corpus, evaluations, the final evaluation and
        # the sample included): the final evaluation is kept back from it at the rate the periodic
        # evaluations measure, and cut to the windows that fit when the whole split cannot
        deadline = started + args.max_minutes * 60 if args.max_minutes else float("inf")
        val_windows = (len(val_data) - 1) // config.block_size
        final_batches = math.ceil(val_windows / args.batch_size) + args.eval_batches
        reserve, per_batch, step_s = 0.0, 0.0, 0.0  # step_s: the last training step's seconds
        train_ema, step, lr = None, 0, lr_at(0, 0.0, args)
        from tqdm import tqdm

        bar = tqdm(total=args.max_steps, mininterval=5, file=sys.stdout, dynamic_ncols=False, ncols=100)
        while True:
            now = time.time()
            elapsed = now - t0
            done = step >= args.max_steps or now + reserve + step_s >= deadline or stop["now"]
            if step % args.eval_interval == 0 or done:
                val = eval_loss(model, val_batches)
                per_batch = (time.time() - now) / len(val_batches)
                reserve = per_batch * final_batches
                tokens = step * args.batch_size * config.block_size
                ema = f"{train_ema:.4f}" if train_ema is not None else ""
                curve.append((step, tokens, round(elapsed, 1), f"{lr:.3g}", ema, f"{val:.4f}"))
                # no train loss before the first step: a dash, not NaN
                shown = f"{train_ema:.4f}" if train_ema is not None else "     -"
                bar.write(f"step {step:6d}  {elapsed / 60:5.1f} min  train {shown}  val {val:.4f}")
                write_curve(out, curve)
                if val < best["val"]:
                    best.update(
                        val=val, step=step, state={k: v.detach().clone() for k, v in model.state_dict().items()}
                    )
                    card = {**base_card, "status": "training", "steps": step, "eval_val_loss": round(val, 4)}
                    write(model, out, tokenizer, card)  # an interrupted run still leaves its best model
            if save_every and (step % save_every == 0 or done):
                save_snapshot(model, out, tokenizer, base_card, step, snap_batches, val_batches, write)
            if done:
                break
            budget = max(deadline - reserve - t0, 1e-9)
            progress = max(step / args.max_steps, elapsed / budget if deadline != float("inf") else 0.0)
            lr = lr_at(step, progress, args)
            for g in opt.param_groups:
                g["lr"] = lr
            before_step = time.time()
            loss = train_step(model, opt, batch(train_data, config.block_size, args.batch_size, gen, device), args)
            step_s = time.time() - before_step
            train_ema = loss if train_ema is None else 0.95 * train_ema + 0.05 * loss
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{train_ema:.3f}", lr=f"{lr:.2e}", refresh=False)
        bar.close()
        train_time = time.time() - t0

        model.load_state_dict(best["state"])
        fits = None  # the whole split, unless the time left holds fewer windows
        if deadline != float("inf") and per_batch > 0:
            left_batches = int((deadline - time.time()) / per_batch) - args.eval_batches
            fits = max(left_batches, args.eval_batches) * args.batch_size
        if fits is not None and fits < val_windows:
            print(f"final evaluation on {fits:,} of {val_windows:,} validation windows (the time left) ...", flush=True)
        else:
            print("final evaluation on the whole validation split ...", flush=True)
        val_loss, used, val_windows = full_loss(model, val_data, config.block_size, args.batch_size, device, fits)
        gen_train = torch.Generator().manual_seed(args.seed + 1)
        train_loss = eval_loss(
            model,
            [
                batch(train_data, config.block_size, args.batch_size, gen_train, device)
                for _ in range(args.eval_batches)
            ],
        )
        card = {
            **base_card,
            "status": "stopped early (signal)" if stop["now"] else "finished",
            "steps": best["step"],
            "steps_run": step,
            "tokens_seen": best["step"] * args.batch_size * config.block_size,
            "train_loss": round(train_loss, 4),
            "val_loss": round(val_loss, 4),
            "val_loss_per_char": round(val_loss / chars_per_token, 4),
            "val_loss_note": "nats per token, mean over every token of the held-out 10% (windows of block_size)"
            if used == val_windows
            else f"nats per token, mean over {used:,} of the {val_windows:,} held-out windows, spread evenly "
            "(all did not fit --max-minutes)",
            "n_params": model.num_params(),
            "training_time_s": round(train_time, 1),
            "total_time_s": round(time.time() - started, 1),
            "sample_prompt": args.sample_prompt,
            "sample": sample(
                model, tokenizer, args.sample_prompt, n=300 if tokenizer.kind == "char" else 100, deadline=deadline
            ),
        }
        write(model, out, tokenizer, card)
        print(
            f"wrote {out}: val loss {val_loss:.4f} nats/token ({val_loss / chars_per_token:.4f} per char), "
            f"{model.num_params():,} parameters, {train_time / 60:.1f} min",
            flush=True,
        )
        return out


def writer(args: argparse.Namespace, config: GPTConfig):
    """The function that writes a checkpoint of this run (model, out, tokenizer, card): gptviz's own
    format, or a Hugging Face Llama directory; ConfigError at once when the run cannot be written as asked."""
    if getattr(args, "format", "gptviz") != "hf":
        return save
    if args.tokenizer != "bpe":
        raise ConfigError("--format hf writes the tokenizer as tokenizer.json: use --tokenizer bpe")
    if refusal(config):
        raise ConfigError(f"--format hf: {refusal(config)}")
    return save_hf_llama


def without_causal_mask(model: GPT) -> None:
    """The --no-causal-mask mistake, for teaching: every forward pass of this model (training, evaluation,
    the card's sample) runs the explicit attention path with the mask replaced by all True, so each
    position also reads the tokens after it, the one it must predict included. Hooks, not a model change:
    the checkpoint it writes is an ordinary causal model, and loads as one."""
    tokens: list[contextvars.Token] = []

    def enter(module: torch.nn.Module, inputs: tuple) -> None:
        tokens.append(_explicit.set(True))  # the mask probe only runs on the explicit path

    def leave(module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        _explicit.reset(tokens.pop())

    model.register_forward_pre_hook(enter)
    model.register_forward_hook(leave, always_call=True)
    for block in model.transformer.h:
        block.attn.mask.register_forward_hook(lambda module, inputs, mask: torch.ones_like(mask))


@contextmanager
def stop_on_signals() -> Iterator[dict[str, bool]]:
    """A flag that SIGTERM / SIGINT set, so the loop can stop cleanly: evaluate and write the best model.
    The previous handlers come back afterwards; off the main thread signals are left alone."""
    stop, previous = {"now": False}, {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop["now"] = True

    try:
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    except ValueError:  # not the main thread
        pass
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def snapshot_dir(out: Path, step: int) -> Path:
    """Where --save-every keeps the checkpoint of this step: OUT/step-000100/ (zero-padded, so names sort)."""
    return out / f"step-{step:06d}"


def save_snapshot(
    model: GPT,
    out: Path,
    tokenizer: Tokenizer,
    base_card: dict,
    step: int,
    train_batches: list[tuple[torch.Tensor, torch.Tensor]],
    val_batches: list[tuple[torch.Tensor, torch.Tensor]],
    write=save,
) -> Path:
    """Write this step's model (in the run's format) with its train and val loss on the card."""
    train_loss, val_loss = eval_loss(model, train_batches), eval_loss(model, val_batches)
    card = {
        **base_card,
        "status": "snapshot",
        "steps": step,
        "train_loss": round(train_loss, 4),
        "val_loss": round(val_loss, 4),
        "val_loss_note": "nats per token, mean over the fixed --eval-batches windows of each split",
    }
    card.pop("loss_curve", None)  # the curve lies in the run folder, not beside each snapshot
    return write(model, snapshot_dir(out, step), tokenizer, card)


def write_curve(out: Path, rows: list[tuple]) -> None:
    """Write the loss curve so far as loss_curve.csv beside the checkpoint (rewritten each evaluation)."""
    with open(out / "loss_curve.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
