"""Circuits on the user's own model: attribution graphs over transcoders and why a head attends
where it does (docs/graphs.md, "The attribution graph")."""

from .attention import attention_attribution
from .graph import Graph, attribution_graph

__all__ = ["Graph", "attribution_graph", "attention_attribution"]
