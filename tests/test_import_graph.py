"""No import circle among gptviz's modules: read every module's imports with ast (module-level and
inside functions alike, `if TYPE_CHECKING:` blocks aside: those never run) and look for a strongly
connected component of more than one module, or a module importing itself.

An import `from .pkg import name` counts as an edge to pkg.name where that is a module, else to pkg
(its __init__). A circle that Python tolerates today (a late import inside a function) still makes
two modules that can be read, tested and moved only together: the graph is kept a tree of floors."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gptviz"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    walk(other)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child)

    walk(tree)
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The gptviz modules `name` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        for target in targets:
            while target and target not in known:  # `import gptviz.x.y` -> the deepest module that exists
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph(skip: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """module -> the gptviz modules it imports, leaving out modules under any prefix in skip."""
    found = modules()
    known = set(found)
    kept = {n: p for n, p in found.items() if not n.startswith(skip)}
    return {n: {m for m in imports_of(n, p, known) if m in kept} for n, p in kept.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_circle_finder_finds_a_circle_and_only_a_circle():
    """The finder itself: a two-module circle and a three-module one are found, a chain is not."""
    edges = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"e"}, "e": {"f"}, "f": {"d"}, "g": {"c"}}
    assert circles(edges) == [["a", "b"], ["d", "e", "f"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_relative_imports_resolve_to_the_modules_they_name():
    """`from ..model import GPT` in gptviz.analysis.heads is an edge to gptviz.model; `from . import x`
    to the submodule x where there is one."""
    edges = graph()
    assert "gptviz.model" in edges["gptviz.capture"]
    assert "gptviz.attention" in edges["gptviz.model"]
    assert "gptviz.formats.bundle" in edges["gptviz.formats"]


def test_the_library_has_no_import_circle():
    """Outside gptviz/dashboard (its own test may extend this), no module reaches itself through imports."""
    assert circles(graph(skip=("gptviz.dashboard",))) == []
