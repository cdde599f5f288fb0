"""Circuits on the user's own model: attribution graphs over transcoders and why a head attends
where it does (docs/architecture.md, "Circuits")."""

from .graph import Graph, attribution_graph

__all__ = ["Graph", "attribution_graph"]
