"""The dashboard's side of gptviz: the only package that imports Streamlit.

The frame every page sits in is at this package's top (pages, keys, caches, state, sidebar, widgets,
layout, progress); the rest is in sub-packages by role (sources/, panels/, corpus/, classroom/). What
each module owns: docs/architecture.md, "The dashboard".
"""
