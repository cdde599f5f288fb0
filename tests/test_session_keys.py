"""Private session keys are declared once (gptviz.dashboard.keys) and used by name everywhere."""

import ast
from pathlib import Path

from gptviz.dashboard import keys

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = [ROOT / "app.py", *(ROOT / "gptviz" / "dashboard").rglob("*.py"), *(ROOT / "views").glob("*.py")]


def _is_session_state(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "session_state"


def _private_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals starting with "_" used as a session key: st.session_state["_x"], .get("_x"), .pop("_x")."""
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and _is_session_state(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_session_state(node.func.value):
            key = node.args[0] if node.args else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("_"):
            found.append((node.lineno, key.value))
    return found


def test_private_session_keys_are_named_by_their_constant():
    used = [
        f"{p.relative_to(ROOT)}:{line} {k}"
        for p in DASHBOARD
        for line, k in _private_literals(ast.parse(p.read_text()))
    ]
    assert used == []


def test_declared_keys_are_private_and_distinct():
    declared = {n: v for n, v in vars(keys).items() if n.isupper()}
    assert len(declared) >= 19
    assert all(isinstance(v, str) and v.startswith("_") for v in declared.values())
    assert len(set(declared.values())) == len(declared)


def test_every_declared_key_is_used():
    text = "\n".join(p.read_text() for p in DASHBOARD if p.name != "keys.py")
    unused = [n for n in vars(keys) if n.isupper() and f"keys.{n}" not in text]
    assert unused == []
