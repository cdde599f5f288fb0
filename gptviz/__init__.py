"""gptviz: look inside GPT-style transformers.

    bundle = gptviz.load("checkpoints/shakespeare-char")
    trace = gptviz.trace(bundle.model, ids, bundle.tokenizer)
    trace["blocks.0.attn.weights"]   # [H, T, T] exact values

The package reads in the order data flows: tokenizers -> model (with probes) -> capture ->
Trace (record) -> analysis -> figures -> dashboard. Importing gptviz does not import Streamlit.
"""

from . import threads as _threads  # noqa: F401, I001 (first: sets OpenMP's wait before torch loads)
from .analysis import Finding, head_scores, health, logit_attribution, logit_lens, patching_sweep
from .capture import trace
from .circuits import Graph, attention_attribution, attribution_graph
from .config import GPTConfig
from .errors import (
    ArgumentError,
    CheckpointError,
    ConfigError,
    DeviceError,
    GptvizError,
    PromptError,
    UnknownCharacterError,
)
from .features import SAE, load_sae
from .features.activations import feature_activations
from .features.edits import edit_features
from .training.sae import train_sae
from .transcoders import Transcoder, TranscoderSet, load_transcoders, train_transcoders
from .formats import Bundle, LoadReport, MemoryPath, load, save
from .generation import Generation, generate
from .interventions import ablate, intervene, patch
from .attention import explicit_attention
from .model import GPT
from .names import contract_names, point
from .progress import Cancelled, Progress
from .record import Trace
from .scanning import Scan, load_scan, scan
from .steering import neuron_direction, steer, steering_sweep, steering_vector
from .tokenizers import BPETokenizer, CharTokenizer, Tokenizer, display_token, encode_prompt, parse_ids

__all__ = [
    "GPT",
    "GPTConfig",
    "Trace",
    "trace",
    "scan",
    "load_scan",
    "Scan",
    "generate",
    "Generation",
    "ablate",
    "patch",
    "intervene",
    "patching_sweep",
    "SAE",
    "load_sae",
    "train_sae",
    "feature_activations",
    "edit_features",
    "Transcoder",
    "Graph",
    "attribution_graph",
    "attention_attribution",
    "TranscoderSet",
    "load_transcoders",
    "train_transcoders",
    "steer",
    "steering_vector",
    "steering_sweep",
    "neuron_direction",
    "health",
    "head_scores",
    "logit_lens",
    "logit_attribution",
    "Finding",
    "explicit_attention",
    "load",
    "save",
    "Bundle",
    "LoadReport",
    "MemoryPath",
    "Tokenizer",
    "CharTokenizer",
    "BPETokenizer",
    "display_token",
    "encode_prompt",
    "parse_ids",
    "contract_names",
    "point",
    "GptvizError",
    "ConfigError",
    "PromptError",
    "ArgumentError",
    "UnknownCharacterError",
    "CheckpointError",
    "DeviceError",
    "Progress",
    "Cancelled",
]
