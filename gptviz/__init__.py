"""gptviz: look inside GPT-style transformers.

    bundle = gptviz.load("checkpoints/shakespeare-char")
    trace = gptviz.trace(bundle.model, ids, bundle.tokenizer)
    trace["blocks.0.attn.weights"]   # [H, T, T] exact values

Importing gptviz does not import Streamlit.
"""

from .bpe import BPETokenizer
from .capture import trace
from .checkpoint import Bundle, LoadReport, load, save
from .errors import CheckpointError, ConfigError, DeviceError, GptvizError, PromptError, UnknownCharacterError
from .model import GPT, GPTConfig
from .tokenizer import CharTokenizer, Tokenizer, display_token, encode_prompt
from .trace import Trace, contract_names

__all__ = [
    "GPT",
    "GPTConfig",
    "Trace",
    "trace",
    "load",
    "save",
    "Bundle",
    "LoadReport",
    "Tokenizer",
    "CharTokenizer",
    "BPETokenizer",
    "display_token",
    "encode_prompt",
    "contract_names",
    "GptvizError",
    "ConfigError",
    "PromptError",
    "UnknownCharacterError",
    "CheckpointError",
    "DeviceError",
]
