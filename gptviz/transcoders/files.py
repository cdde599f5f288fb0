"""Reading and writing transcoders as untrusted files: circuit-tracer's transcoder_set layout and
Gemma Scope's params files.

circuit-tracer (its configs and load_transcoder_set): a folder with `config.yaml`

    model_kind: transcoder_set
    feature_input_hook: mlp.hook_in          # TransformerLens's name of what the MLP reads
    feature_output_hook: hook_mlp_out
    activation: topk                          # and k; jumprelu where the files hold a threshold, else relu
    k: 32
    transcoders: [layer_0.safetensors, layer_1.safetensors, ...]     # index = layer

and `layer_{l}.safetensors` holding W_enc [d_tc, d_model], W_dec [d_tc, d_model], b_enc [d_tc],
b_dec [d_model], optionally a threshold (`activation_function.threshold`, or `threshold`) and W_skip.
Older configs list {id, layer, filepath} entries; without `transcoders` the layer files are found.
Gemma Scope: `params.safetensors` / `params.npz` with w_enc [d_model, d_tc] (Gemma Scope 2's
lowercase names; Gemma Scope 1's W_enc), w_dec, b_enc, b_dec, threshold, and Gemma Scope 2's
`affine_skip_connection` [d_model, d_model]: a layer file in either naming, or a params file on its
own (its layer from `layer=` or the path's `layer_12`).

config.yaml is read with a safe loader (no tags that build objects, no aliases), and every weights
file's header is read and checked (names, shapes, float dtypes, sizes; features/vetting.py, as SAE
files are) before any array is.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, cast

import torch
import yaml
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..features.vetting import check_arrays, read_arrays, read_headers
from ..formats.inmemory import MemoryPath
from ..formats.safe import read_bytes, user_path
from .errors import TranscoderError
from .sets import TranscoderSet
from .transcoder import ACTIVATIONS, Transcoder

CONFIG = "config.yaml"
PARAMS = ("params.safetensors", "params.npz")
MAX_CONFIG_BYTES = 1 << 20
MAX_D_MODEL = 1 << 17
MAX_D_TC = 1 << 22
MAX_LAYERS = 1024
MAX_PARAMS = 1 << 31  # per layer: 8 GB as float32
HEADER_ALLOWANCE = 1 << 20
FLOAT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# TransformerLens's names of the points a transcoder may read and write, as configs spell them
INPUT_HOOKS = ("mlp.hook_in", "ln2.hook_normalized")
OUTPUT_HOOKS = ("hook_mlp_out", "mlp.hook_out")
_LAYER = re.compile(r"layer_(\d+)")


# --- config.yaml -----------------------------------------------------------------------------------
def read_config(path: Path) -> dict:
    """config.yaml as a dict, or one TranscoderError line: not YAML, YAML that asks for code or
    objects (a python/ tag, any tag), aliases (a "billion laughs" expands through them), not a mapping."""
    try:
        text = read_bytes(path, MAX_CONFIG_BYTES, "transcoder config.yaml").decode("utf-8")
    except CheckpointError as e:
        raise TranscoderError(str(e)) from None
    except UnicodeDecodeError:
        raise TranscoderError(f"{path}: not YAML (not UTF-8 text)") from None
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise TranscoderError(f"{path}: uses YAML aliases (*name); a transcoder config has no need of them")
            tag = getattr(event, "tag", None)
            if tag and tag.startswith("!") and not tag.startswith("tag:yaml.org,2002:"):
                raise TranscoderError(f"{path}: asks YAML to build {tag[:60]!r}; gptviz reads plain values only")
            if tag and "python" in tag:
                raise TranscoderError(f"{path}: asks YAML to run code ({tag[:60]}); refused")
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise TranscoderError(f"{path}: not YAML{at}: {str(getattr(e, 'problem', '') or e)[:100]}") from None
    if not isinstance(raw, dict):
        raise TranscoderError(f"{path}: a transcoder config is a mapping (model_kind: ..., transcoders: ...)")
    return raw


def _hooks(raw: dict, source: Path) -> None:
    kind = raw.get("model_kind", "transcoder_set")
    if kind != "transcoder_set":
        raise TranscoderError(f"{source}: model_kind {str(kind)[:40]!r}; gptviz reads per-layer transcoder_set ones")
    for key, known, site in (
        ("feature_input_hook", INPUT_HOOKS, "mlp.in"),
        ("feature_output_hook", OUTPUT_HOOKS, "mlp.out"),
    ):
        hook = raw.get(key)
        if hook is not None and hook not in known:
            raise TranscoderError(
                f"{source}: {key} {str(hook)[:60]!r} names no point a transcoder reads or writes here "
                f"({' or '.join(known)}: blocks.{{l}}.{site})"
            )


def _activation(raw: dict, source: Path) -> tuple[str | None, int | None]:
    act = raw.get("activation")
    if act is None:
        return None, None
    if act not in ACTIVATIONS:
        raise TranscoderError(f"{source}: activation {str(act)[:40]!r} is not one of {', '.join(ACTIVATIONS)}")
    if act != "topk":
        return act, None
    k = raw.get("k")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_D_TC:
        raise TranscoderError(f"{source}: a topk transcoder set needs a whole number k, got {str(k)[:40]!r}")
    return act, k


def _inside(folder: Path, name: Any, source: Path) -> Path:
    if not isinstance(name, str) or not name:
        raise TranscoderError(f"{source}: a transcoder's file is named by text, got {str(name)[:60]!r}")
    if name.startswith("hf://") or "://" in name:
        raise TranscoderError(f"{source}: {name[:80]} is on a hub; gptviz reads files on this machine: download it")
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise TranscoderError(f"{source}: {name[:80]} lies outside the transcoders' folder")
    return folder / rel


def layer_files(folder: Path, raw: dict, source: Path) -> dict[int, Path]:
    """layer -> its file, as config.yaml lists them (a list of names, index = layer, or circuit-tracer's
    older {layer, filepath} entries), or the folder's layer_{l}.safetensors / layer_{l}/params.* files."""
    listed = raw.get("transcoders")
    out: dict[int, Path] = {}
    if listed is None:
        for p in folder.iterdir():
            m = _LAYER.fullmatch(p.name.removesuffix(".safetensors"))
            if m and p.name.endswith(".safetensors"):
                out[int(m.group(1))] = p
            elif m and p.is_dir():
                found = [p / name for name in PARAMS if (p / name).is_file()]
                if found:
                    out[int(m.group(1))] = found[0]
    elif isinstance(listed, list) and len(listed) <= MAX_LAYERS:
        for i, entry in enumerate(listed):
            if isinstance(entry, dict):
                layer, name = entry.get("layer"), entry.get("filepath")
                if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < MAX_LAYERS:
                    raise TranscoderError(f"{source}: entry {i} has no whole-number layer")
            else:
                layer, name = i, entry
            if layer in out:
                raise TranscoderError(f"{source}: two transcoders for layer {layer}")
            out[layer] = _inside(folder, name, source)
    else:
        raise TranscoderError(f"{source}: 'transcoders' is a list of at most {MAX_LAYERS} layer files")
    if not out:
        raise TranscoderError(f"{folder}: names no transcoder files (layer_0.safetensors, ...)")
    return dict(sorted(out.items()))


# --- one layer's weights ---------------------------------------------------------------------------
def _headers(file: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) of a weights file's arrays, from its headers alone (features/vetting.py)."""
    return {k: (h.shape, h.dtype) for k, h in read_headers(file, TranscoderError).items()}


def _plan(found: dict, file: Path) -> tuple[dict[str, str], dict[str, tuple[int, ...]], bool, int, int]:
    """(our name -> the file's name, our name -> the expected shape as stored, whether W_enc is stored
    [d_model, d_tc], d_model, d_tc), from the header: circuit-tracer's or Gemma Scope's naming."""
    gemma = "w_enc" in found or ("W_enc" in found and "b_enc" in found and file.name in PARAMS)
    names = (
        {"W_enc": "w_enc", "W_dec": "w_dec", "b_enc": "b_enc", "b_dec": "b_dec"}
        if "w_enc" in found
        else {k: k for k in ("W_enc", "W_dec", "b_enc", "b_dec")}
    )
    for key in ("b_enc", "b_dec"):
        if names[key] not in found or len(found[names[key]][0]) != 1:
            raise TranscoderError(f"{file}: has no 1-D {names[key]}, so it is not a transcoder's weights")
    d_tc, d_model = found[names["b_enc"]][0][0], found[names["b_dec"]][0][0]
    if not (1 <= d_model <= MAX_D_MODEL and 1 <= d_tc <= MAX_D_TC) or 2 * d_model * d_tc > MAX_PARAMS:
        raise TranscoderError(f"{file}: d_model={d_model}, d_tc={d_tc} is larger than gptviz loads")
    shapes = {
        "W_enc": (d_model, d_tc) if gemma else (d_tc, d_model),
        "W_dec": (d_tc, d_model),
        "b_enc": (d_tc,),
        "b_dec": (d_model,),
    }
    for key in ("activation_function.threshold", "threshold"):
        if key in found:
            names["threshold"], shapes["threshold"] = key, (d_tc,)
            break
    for key in ("W_skip", "affine_skip_connection"):
        if key in found:
            names["W_skip"], shapes["W_skip"] = key, (d_model, d_model)
    for ours, theirs in names.items():
        if theirs not in found:
            raise TranscoderError(f"{file}: has no {theirs} (a transcoder's weights are {', '.join(names.values())})")
        shape, dtype = found[theirs]
        if tuple(shape) != shapes[ours]:
            raise TranscoderError(
                f"{file}: {theirs} has shape {list(shape)}, but d_model={d_model}, d_tc={d_tc} "
                f"give {list(shapes[ours])}"
            )
        if dtype not in FLOAT_BYTES:
            raise TranscoderError(f"{file}: {theirs} holds {str(dtype)[:20]}, not floating-point numbers")
    return names, shapes, gemma, d_model, d_tc


def read_layer(file: Path, layer: int, activation: str | None = None, k: int | None = None) -> Transcoder:
    """One layer's transcoder from its file, every header checked before an array is read."""
    found = _headers(file)
    names, shapes, gemma, d_model, d_tc = _plan(found, file)
    act = activation or ("jumprelu" if "threshold" in names else "relu")
    if act == "jumprelu" and "threshold" not in names:
        raise TranscoderError(f"{file}: a jumprelu transcoder needs a threshold, and this file has none")
    if act == "topk" and k is not None and k > d_tc:
        raise TranscoderError(f"{file}: k={k} is more than its {d_tc} features")
    needed = sum(8 * math.prod(s) for s in shapes.values()) + HEADER_ALLOWANCE
    expected = {names[ours]: shape for ours, shape in shapes.items()}
    check_arrays(file, expected, needed, TranscoderError)  # sizes, dtypes, an .npz's unpacked bytes
    stored = read_arrays(file, list(expected), TranscoderError)
    arrays = {ours: stored[theirs] for ours, theirs in names.items()}
    tc = Transcoder(d_model, d_tc, layer, act, k=k, skip="W_skip" in names)
    with torch.no_grad():
        for ours, t in arrays.items():
            t = t.float()
            if not torch.isfinite(t).all():
                raise TranscoderError(f"{file}: {names[ours]} holds NaN or infinite values")
            if ours == "W_enc" and gemma or ours == "W_skip" and names[ours] == "affine_skip_connection":
                t = t.T  # stored [d_model, ·]: x @ w_enc; ours multiplies by the transpose
            getattr(tc, ours).copy_(t)
    return tc.requires_grad_(False)


# --- a set -----------------------------------------------------------------------------------------
def load_transcoders(path, layer: int | None = None) -> TranscoderSet:
    """Transcoders from disk: circuit-tracer's transcoder_set folder (config.yaml + layer_{l}.safetensors,
    or only the layer files), or a Gemma Scope params.safetensors / params.npz (a file, or a folder
    holding one; its layer from `layer` or the path's `layer_12`). Each problem is one line."""
    # a MemoryPath (an upload held in memory) answers every pathlib call made here (formats/inmemory.py)
    p = cast(Path, path) if isinstance(path, MemoryPath) else user_path(path)
    if p.is_dir() and (p / CONFIG).is_file():
        raw = read_config(p / CONFIG)
        _hooks(raw, p / CONFIG)
        act, k = _activation(raw, p / CONFIG)
        files = layer_files(p, raw, p / CONFIG)
        meta = {key: v for key, v in raw.items() if key != "transcoders"}
    elif p.is_dir() and any((p / name).is_file() for name in PARAMS):
        return load_transcoders(next(p / n for n in PARAMS if (p / n).is_file()), layer)
    elif p.is_dir():
        files, act, k, meta = layer_files(p, {}, p), None, None, {}
    elif p.name in PARAMS or p.suffix in (".npz", ".safetensors"):
        m = _LAYER.search(str(p))
        if layer is None:
            if m is None:
                raise TranscoderError(f"{p}: does not say which layer it replaces; give layer= (e.g. layer=12)")
            layer = int(m.group(1))
        files, act, k, meta = {int(layer): p}, None, None, {}
    elif not p.exists():
        raise TranscoderError(f"{p}: no such file or folder")
    else:
        raise TranscoderError(f"{p}: not transcoders; give a folder with {CONFIG} and layer_0.safetensors, ...")
    for l, file in files.items():
        if not file.is_file():
            raise TranscoderError(f"{file}: no such file (config.yaml lists it for layer {l})")
    tcs = TranscoderSet([read_layer(file, l, act, k) for l, file in files.items()], meta)
    tcs.path = str(p)
    return tcs


def save_transcoders(tcs: TranscoderSet, out, meta: dict | None = None) -> Path:
    """Write `tcs` in circuit-tracer's transcoder_set layout: config.yaml and layer_{l}.safetensors."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    first = tcs[tcs.layers[0]]
    body: dict[str, Any] = {
        "model_kind": "transcoder_set",
        **{k: v for k, v in {**tcs.meta, **(meta or {})}.items() if k not in ("activation", "k", "transcoders")},
        "feature_input_hook": TranscoderSet.input_hook,
        "feature_output_hook": TranscoderSet.output_hook,
        "activation": first.activation,
    }
    if first.k is not None:
        body["k"] = first.k
    names = [f"layer_{l}.safetensors" for l in tcs.layers]
    # circuit-tracer's list is indexed by layer and covers layers 0 … L-1; a set of some layers says each one's
    body["transcoders"] = (
        names
        if tcs.layers == list(range(len(tcs)))
        else [{"id": f"layer_{l}", "layer": l, "filepath": n} for l, n in zip(tcs.layers, names, strict=True)]
    )
    for l in tcs.layers:
        tc = tcs[l]
        tensors = {name: getattr(tc, name) for name in ("W_enc", "W_dec", "b_enc", "b_dec", "W_skip")}
        if tc.threshold is not None:
            tensors["activation_function.threshold"] = tc.threshold
        data = {k: v.detach().float().contiguous().cpu() for k, v in tensors.items() if v is not None}
        save_file(data, str(out / f"layer_{l}.safetensors"))
    (out / CONFIG).write_text(yaml.safe_dump(body, sort_keys=False))
    return out
