"""The dashboard's side of gptviz: the only package that imports Streamlit.

sources.py  where a checkpoint comes from: shipped folders, a path, an upload, the demo model
caches.py   the process-wide caches: one model per checkpoint version, one Trace per run
state.py    the View every page reads, and the choices mirrored into the URL
sidebar.py  the shared sidebar that builds the View
widgets.py  charts, downloads, messages and the page guard
"""
