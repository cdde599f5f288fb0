"""Transcoders on the user's own model (docs/circuits.md, "Train, load, measure"): one per layer, each
reading what the MLP reads (blocks.{l}.mlp.in) and writing an estimate of what it adds (mlp.out).

    tcs = gptviz.train_transcoders(model, "samples/shakespeare", out="my-transcoders")
    tcs = gptviz.load_transcoders("checkpoints/shakespeare-char/transcoders")
    tcs.fidelity(model, data)                      # top-1 agreement, KL, NMSE per layer, dead share
    gptviz.edit_features(tcs[1], features=[7])     # an edit of blocks.1.mlp.out, error kept

transcoder.py holds the module and its equations (circuit-tracer's layout), files.py reads and
writes circuit-tracer's transcoder_set layout and Gemma Scope 2's files, training.py trains them,
fidelity.py measures the replacement model, edits.py edits features inside a run.
"""

from .edits import TranscoderEdit
from .errors import TranscoderError
from .files import load_transcoders, save_transcoders
from .training import TranscoderReport, train_transcoders
from .transcoder import Transcoder, TranscoderSet

__all__ = [
    "Transcoder",
    "TranscoderSet",
    "TranscoderError",
    "TranscoderEdit",
    "TranscoderReport",
    "load_transcoders",
    "save_transcoders",
    "train_transcoders",
]
