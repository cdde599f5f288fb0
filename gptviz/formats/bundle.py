"""What every loader returns (a Bundle with its LoadReport), and the steps every loader shares:
checking the weights' shapes against the config before any model is built, filling a model built
without storage (the meta device) tensor by tensor from the file, and finishing it on its device."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import cast

import torch

from ..config import GPTConfig
from ..decoding import is_block_linear
from ..devices import HALF_DTYPES, choose_dtype, dtype_name
from ..errors import CheckpointError, summarise
from ..model import GPT
from ..progress import ProgressFn, Reporter
from ..tokenizers import Tokenizer
from .weights import READ, Stacked, copy_rows, finite_sum


@dataclass
class LoadReport:
    """What a load found: shown in the dashboard and by `python -m gptviz info`."""

    path: str
    format: str
    n_params: int = 0
    dtype: str = ""  # what the model computes in
    stored_dtype: str = ""  # what the file holds its weights in (e.g. "bfloat16")
    device: str = ""
    tokenizer: str = "none"
    missing: list[str] = field(default_factory=list)  # keys the model has and the file lacks
    unexpected: list[str] = field(default_factory=list)  # keys the file has and the model ignores
    reshaped: list[str] = field(default_factory=list)  # keys transposed or split on the way in
    warnings: list[str] = field(default_factory=list)  # problems, e.g. NaN in weights: the dashboard's banner
    notes: list[str] = field(default_factory=list)  # worth knowing, not a problem: e.g. an exact bf16 -> float32

    def as_rows(self) -> list[tuple[str, str]]:
        def keys(v):
            return summarise(v, "keys", show=8) if v else "none"

        return [
            ("path", self.path),
            ("format", self.format),
            ("parameters", f"{self.n_params:,}"),
            ("dtype", self.dtype),
            ("stored dtype", self.stored_dtype or self.dtype),
            ("device", self.device),
            ("tokenizer", self.tokenizer),
            ("missing keys", keys(self.missing)),
            ("unexpected keys", keys(self.unexpected)),
            ("reshaped keys", keys(self.reshaped)),
            ("warnings", keys(self.warnings)),
            ("notes", "; ".join(self.notes) or "none"),
        ]


@dataclass
class Bundle:
    """A loaded checkpoint: the model in eval mode, its tokenizer (None if it has none), the report."""

    model: GPT
    tokenizer: Tokenizer | None
    report: LoadReport
    card: dict = field(default_factory=dict)  # free-form model card (corpus, steps, losses, command)


def finish(model: GPT, report: LoadReport, device: torch.device) -> GPT:
    """Put a loaded model on its device in eval mode and fill the report's summary (fill_model has
    checked its weights for NaN and Inf; a model built another way is checked here)."""
    if not report.dtype:
        bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            report.warnings.append(f"NaN or Inf in weights: {summarise(bad, 'tensors')}")
    model.to(device).eval()
    report.n_params = model.num_params()
    report.dtype = dtype_name(model.dtype)
    report.stored_dtype = report.stored_dtype or report.dtype
    report.device = str(device)
    return model


def tied_keys(config: GPTConfig) -> set[str]:
    return {"lm_head.weight", "transformer.wte.weight"} if config.tie_weights else set()


LAYER_KEY = re.compile(r"transformer\.h\.(\d+)\.")


def check_shapes(config: GPTConfig, shapes: dict[str, tuple[int, ...]], report: LoadReport, source: Path) -> None:
    """Refuse weights the config does not describe, before GPT(config) is built: a wrong shape,
    more layers than n_layer (the model would be cut short), or keys the model needs and the file
    lacks. shapes: the file's own tensor shapes, keyed as the model names them. Keys the model does
    not have go to report.unexpected."""
    expected = config.state_shapes()
    for key, shape in shapes.items():
        if key in expected and tuple(shape) != expected[key]:
            raise CheckpointError(
                f"{source}: {key} has shape {list(shape)} but the config needs {list(expected[key])}; "
                "the config does not describe these weights"
            )
    layers = [int(m.group(1)) for k in shapes if (m := LAYER_KEY.match(k))]
    if layers and max(layers) >= config.n_layer:
        n = max(layers) + 1
        raise CheckpointError(
            f"{source}: the weights hold {n} layers but the config says n_layer={config.n_layer}; "
            f"loading them would cut the model short, so set n_layer to {n}"
        )
    tied = tied_keys(config)
    missing = [k for k in expected if k not in shapes and not (k in tied and tied & set(shapes))]
    if missing:
        raise CheckpointError(f"{source}: weights missing for {summarise(missing, 'keys')}")
    report.unexpected = [k for k in shapes if k not in expected]


def compute_dtype(stored: list[str], asked: str, config: GPTConfig, device: torch.device, report: LoadReport):
    """The dtype to fill the model in (devices.choose_dtype), with the report's stored dtype and notes.
    stored: the file's floating dtypes, most elements first."""
    shapes = config.state_shapes()
    n_params = sum(math.prod(s) for k, s in shapes.items() if not (config.tie_weights and k == "lm_head.weight"))
    dtype, why = choose_dtype(asked, stored[0] if stored else "float32", n_params, device)
    report.stored_dtype = ", ".join(stored) or "float32"
    name = dtype_name(dtype)
    if why:
        report.notes.append(why)
    if stored and stored != [name]:
        exact = name == "float32" and all(d in HALF_DTYPES for d in stored)
        how = "exact: every value is kept" if exact else "each weight rounded to the nearest"
        report.notes.append(f"weights stored as {report.stored_dtype}, computed in {name} ({how})")
    return dtype


def _own(value: torch.Tensor, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a tensor can become a parameter as it is: Weights.get read it into memory of its own (no
    one else holds it, no view of a larger tensor) in the compute dtype, on the device."""
    return (
        getattr(value, READ, False)
        and value.dtype == dtype
        and value.device == device
        and value.is_contiguous()
        and value.storage_offset() == 0
        and value.untyped_storage().nbytes() == value.numel() * value.element_size()
    )


def in_out_copy(value: torch.Tensor, dtype: torch.dtype, rows: int = 256) -> torch.Tensor:
    """value [out, in] converted to dtype on the CPU, its values laid out [in, out] (decoding.in_out_layout,
    which a step of decoding reads faster in float32: SmolLM2-135M 41.7 -> 35.8 ms a token). `rows` rows of
    value at a time: torch transposes such a block fast in its own dtype (a tiled kernel), then the
    conversion writes `rows` values in a run into each row of the result. A float32 load of Llama-3.2-1B
    from bf16 takes 0.5 s of CPU more than with plain conversions (3.3 s); 16 rows at a time written
    strided took 1.0 s more, and one strided copy of each whole transpose 3.8x a plain conversion."""
    out = torch.empty(value.shape[::-1], dtype=dtype).t()
    copy_rows(out, value, rows)
    return out


def _check_shape(source: Path, key: str, shape: Iterable[int], wanted: torch.Size) -> None:
    if tuple(shape) != tuple(wanted):
        raise CheckpointError(f"{source}: {key} has shape {list(shape)} but the config needs {list(wanted)}")


def _converted(
    value: torch.Tensor, name: str, key: str, wanted: torch.Size, dtype: torch.dtype, device: torch.device, source: Path
) -> torch.Tensor:
    """A tensor made by a loader, as the parameter `name`: kept where it is one (_own), else converted
    to dtype on device into memory of its own."""
    _check_shape(source, key, value.shape, wanted)
    if _own(value, dtype, device):  # read from the file into memory of its own, as it is needed
        return value
    if value.dim() == 2 and value.t().is_contiguous() and not value.is_contiguous():
        # handed over as the transpose of a stored [in, out] (GPT-2's Conv1D): kept laid out so (in_out_layout)
        return torch.empty(value.shape[::-1], dtype=dtype, device=device).copy_(value.t()).t()
    if value.dtype != dtype and dtype == torch.float32 and device.type == "cpu" and is_block_linear(name):
        return in_out_copy(value, dtype)  # converted anyway (a bf16 file computed in float32): written [in, out]
    return torch.empty(value.shape, dtype=dtype, device=device).copy_(value)  # converted, contiguous, owned


def fill_model(
    config: GPTConfig,
    tensors: Iterable[tuple[str, Callable[[], torch.Tensor]]],
    dtype: torch.dtype,
    device: torch.device,
    report: LoadReport,
    source: Path,
    progress: ProgressFn | None = None,
) -> GPT:
    """GPT(config) built with no storage (GPT.empty), each parameter then filled once: tensors gives
    our key and how to make its tensor (read from the file, stacked or transposed as stored), which is
    converted to dtype on device, checked for NaN / Inf, and becomes the parameter; one tensor is in
    flight at a time. A tied head takes the embedding (from lm_head.weight where the file holds it, as
    a load_state_dict would leave it: the later of the two wins). Every parameter must be filled, in
    the shape the config gives. progress: reports the bytes filled (_Fills)."""
    model = GPT.empty(config)
    params = dict(model.named_parameters(remove_duplicate=False))
    tied = config.tie_weights
    bad = []
    fills = _Fills(progress, params, dtype)
    for key, make in tensors:
        name = "transformer.wte.weight" if tied and key == "lm_head.weight" else key
        if name not in params:
            continue
        if isinstance(make, Stacked) and device.type == "cpu":  # rows written straight in
            _check_shape(source, key, make.shape, params[name].shape)
            laid = dtype == torch.float32 and make.dtype != dtype and is_block_linear(name) and len(make.shape) == 2
            t = torch.empty(make.shape[::-1], dtype=dtype).t() if laid else torch.empty(make.shape, dtype=dtype)
            finite = make.into(t)
        else:
            t = _converted(make(), name, key, params[name].shape, dtype, device, source)
            finite = finite_sum(t)
        # a sum is not finite exactly when a value is not, or when it overflowed: then every value is looked at
        if not finite and not torch.isfinite(t).all():
            bad.append(key)
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        module._parameters[attr] = torch.nn.Parameter(t, requires_grad=params[name].requires_grad)
        fills.filled(name)
    if tied:
        wte = cast(torch.nn.Embedding, model.transformer.wte)  # GPT builds wte as an nn.Embedding
        model.lm_head.weight = wte.weight
    missing = [n for n, p in model.named_parameters(remove_duplicate=False) if p.is_meta]
    if missing:
        raise CheckpointError(f"{source}: weights missing for {summarise(missing, 'keys')}")
    if bad:
        report.warnings.append(f"NaN or Inf in weights: {summarise(bad, 'tensors')}")
    model.reset_buffers(device)
    report.dtype = dtype_name(dtype)
    return model


class _Fills:
    """The reports of a fill: the bytes of the parameters filled so far, of all of them, in the dtype the
    model computes in. Reading a tensor and converting it take time in proportion to its size, so bytes
    (not tensors: an embedding outweighs a norm a hundred-thousand-fold) give an honest estimate. A
    parameter filled twice (a tied head the file holds as well) counts once. Nothing is done without a
    callback (the plain load pays nothing)."""

    def __init__(self, progress: ProgressFn | None, params: dict[str, torch.nn.Parameter], dtype: torch.dtype):
        self.reporter = None
        if progress is None:
            return
        self.sizes = {n: p.numel() * dtype.itemsize for n, p in params.items()}
        total = sum({id(p): self.sizes[n] for n, p in params.items()}.values())  # a tied pair once
        self.unit = 2**20 if total >= 16 * 2**20 else 2**10  # MB for a large model, kB for a small one
        self.bytes, self.total = 0, total
        self.seen: set[str] = set()
        self.reporter = Reporter(progress, "MB" if self.unit == 2**20 else "kB", total=self._units(total))
        self.reporter.start()

    def _units(self, n: int) -> int:
        return -(-n // self.unit)  # rounded up: the last report equals the total

    def filled(self, name: str) -> None:
        if self.reporter is None or name in self.seen:
            return
        self.seen.add(name)
        self.bytes += self.sizes[name]
        self.reporter.tick(self._units(min(self.bytes, self.total)) - self.reporter.done)


def fill_from_state(
    config: GPTConfig,
    state: dict[str, torch.Tensor],
    dtype: torch.dtype,
    device: torch.device,
    report: LoadReport,
    source: Path,
    progress: ProgressFn | None = None,
) -> GPT:
    """fill_model from a state dict keyed as our model names its parameters, each tensor let go once
    it is in the model. Keys the model does not have are recorded in report.unexpected."""
    check_shapes(config, {k: tuple(v.shape) for k, v in state.items()}, report, source)
    order = sorted(state, key=lambda k: k == "lm_head.weight")  # a tied head last: it wins, as it did
    tensors = ((k, partial(state.pop, k)) for k in order)
    return fill_model(config, tensors, dtype, device, report, source, progress)
