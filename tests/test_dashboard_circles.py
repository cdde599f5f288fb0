"""No import circle inside gptviz/dashboard: every module there imports the dashboard's modules below it
only, function-level imports included (a deferred import is still a circle: it only hides it from
Python's loader). test_layering.py checks the order between gptviz's units; this checks inside one."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "gptviz" / "dashboard"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """The modules of `known` that a file imports anywhere in it (from x import y: x.y when that is a module)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[: len(base) - node.level + 1] if node.level else []
            head = ".".join([*base, node.module] if node.module else base)
            names = [head, *(f"{head}.{a.name}" for a in node.names)]
        else:
            continue
        found |= {n for n in names if n in known}
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), and modules importing themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph.get(v, ()):
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def dashboard_graph() -> dict[str, set[str]]:
    files = sorted(DASHBOARD.rglob("*.py"))
    known = {module_name(p) for p in files}
    graph = {module_name(p): imported(p, known) - {module_name(p)} for p in files}
    # a package's __init__ is imported with each of its modules: an edge to it is no circle of theirs
    packages = {module_name(p) for p in files if p.name == "__init__.py"}
    return {m: {d for d in deps if d not in packages} for m, deps in graph.items()}


def test_no_import_circle_in_the_dashboard():
    found = circles(dashboard_graph())
    assert not found, "import circles in gptviz/dashboard: " + "; ".join(" <-> ".join(g) for g in found)


def test_the_check_finds_a_circle_and_a_deferred_import(tmp_path):
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import x\n")
    (pkg / "c.py").write_text("from .a import y\n")
    (pkg / "d.py").write_text("import p.a\n")
    known = {"p", "p.a", "p.b", "p.c", "p.d"}
    graph = {
        module_name(f, tmp_path): imported(f, known, tmp_path) - {module_name(f, tmp_path)} for f in pkg.glob("*.py")
    }
    assert graph["p.b"] == {"p.c"} and graph["p.d"] == {"p.a"}
    assert circles(graph) == [["p.a", "p.b", "p.c"]]
