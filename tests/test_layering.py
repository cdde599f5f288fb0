"""The "imports point down" rule, checked: every module of gptviz/ imports only from units listed above
it in LAYERS (the order data flows), nothing outside gptviz/dashboard imports Streamlit, and the layout
listing in the docs is in the same order, so the claim there cannot drift from the code."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gptviz"

# Each unit (a top-level module or subpackage of gptviz) may import from the units before it only.
LAYERS = (
    "threads",  # OpenMP's wait policy, set before torch loads: imports nothing of gptviz
    "errors",
    "shipped",  # where the shipped checkpoints and samples are (a checkout's folders or package data)
    "cli_args",  # argparse types and checks, shared by the commands
    "limits",
    "names",
    "checks",
    "progress",
    "config",
    "probes",
    "precision",  # how each family rounds in half precision: the norms, GELU, rotary's dtype
    "positions",  # sin/cos and rotary variants
    "decoding",  # the KV caches and decoding's weight layouts
    "attention",  # AttentionSpec, the attention arithmetic and its implementations' table
    "model",
    "layout",  # what a capture reads off a model's module tree (probes' names, parameters), read once
    "cuda_steps",  # decoding on a GPU from one captured step (a CUDA graph over a StaticKVCache)
    "tokenizers",
    "devices",
    "formats",
    "listing",
    "record",
    "rebuild",  # what a Trace gives without holding it: recipes from the values it holds
    "interventions",
    "capture",
    "features",  # sparse autoencoders: files, encode/decode, feature edits (training one is in training/)
    "steering",  # steering vectors and the dose-response sweep
    "steering_spec",  # a steering vector named in words: a link's, a lesson slide's
    "generation",
    "analysis",
    "timeline",
    "figures",
    "lessons",
    "scanning",
    "training",  # gptviz train and train_sae: they read corpora as the scan does
    "transcoders",  # transcoders: one MLP each as sparse directions, their files, fidelity, edits
    "circuits",  # attribution graphs over transcoders, attention attribution
    "__init__",  # the package's front door: `import gptviz` re-exports the library, never the dashboard
    "dashboard",
    "bench",
    "cli",
    "__main__",
)
RANK = {unit: i for i, unit in enumerate(LAYERS)}


def _unit(name: str) -> str:
    """The unit a dotted name under gptviz lies in (a name the package re-exports lies in __init__)."""
    head = name.split(".")[1] if "." in name else "__init__"
    return head if (PKG / head).is_dir() or (PKG / f"{head}.py").is_file() else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file, function-level imports included."""
    mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    pkg = mod.removesuffix(".__init__") if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
            name = ".".join([*base, node.module] if node.module else base)
            # `from .. import figures` names a module; `from gptviz import trace` names a re-export
            found += (
                [(node.lineno, f"{name}.{a.name}") for a in node.names] if name == "gptviz" else [(node.lineno, name)]
            )
    return found


def _sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_unit_has_a_place_in_the_layers():
    units = {_unit(f"gptviz.{p.relative_to(PKG).with_suffix('').parts[0]}") for p in _sources()}
    assert units <= set(RANK), f"add {sorted(units - set(RANK))} to LAYERS"


def test_imports_point_down():
    up = []
    for path in _sources():
        src = _unit(f"gptviz.{path.relative_to(PKG).with_suffix('').parts[0]}")
        for line, name in _imports(path):
            if name.split(".")[0] != "gptviz" or name == "gptviz":
                continue
            dst = _unit(name)
            if dst != src and RANK[dst] > RANK[src]:
                up.append(f"{path.relative_to(ROOT)}:{line} {src} -> {dst}")
    assert up == []  # none is allowed: the eight the old layout listing showed were the listing's order


# The class benchmark talks to a dashboard server in Streamlit's own protocol (its protobufs): it drives
# Streamlit from outside, and only `gptviz bench --classroom` imports it.
SPEAKS_STREAMLIT = {"bench/classroom.py", "bench/ws_client.py"}


@pytest.mark.parametrize(
    ("units", "never"),
    [
        ({u for u in LAYERS if u != "dashboard"}, "streamlit"),  # a notebook or the CLI never loads Streamlit
        ({"figures", "analysis", "scanning", "lessons"}, "gptviz.dashboard"),
        ({"analysis", "record", "capture", "model"}, "gptviz.figures"),
        ({"scanning"}, "ray"),  # only scanning.ray_engine, inside the function that uses it (checked below)
    ],
)
def test_forbidden_imports(units, never):
    hits = []
    for path in _sources():
        src = _unit(f"gptviz.{path.relative_to(PKG).with_suffix('').parts[0]}")
        allowed = (never == "ray" and path.name == "ray_engine.py") or (
            never == "streamlit" and path.relative_to(PKG).as_posix() in SPEAKS_STREAMLIT
        )
        if src in units and not allowed:
            hits += [
                f"{path.relative_to(ROOT)}:{line} {n}" for line, n in _imports(path) if re.match(rf"{never}(\.|$)", n)
            ]
    assert hits == []


def _fenced_blocks(text: str) -> list[str]:
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_documented_layout_is_in_import_order():
    """The layout listing (README or docs) names units top down; its order must be LAYERS' order."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    listings = [block for doc in docs for block in _fenced_blocks(doc.read_text())]
    listings = [block for block in listings if "capture.py" in block and "dashboard/" in block]
    assert listings, "no layout listing of gptviz/ found in README.md or docs/"
    for block in listings:
        listed = [m for m in re.findall(r"^  (\w+)(?:\.py|/)", block, re.M) if m in RANK]
        assert listed == sorted(listed, key=RANK.get), "reorder the listing as LAYERS"


def test_a_notebook_runs_and_queries_scans_without_streamlit():
    """What the Corpus page does with a scan (start it, follow it, query it) imports no Streamlit."""
    import subprocess
    import sys

    code = "import sys, gptviz.scanning.jobs, gptviz.scanning.queries; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
