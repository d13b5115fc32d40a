"""No import cycles among the exporter's modules, counting every import: top-level, inside functions, and under
`if TYPE_CHECKING:`. A lazy or type-only import still ties two modules together; a cycle is where a change to
one module's names breaks the other, and where `import` order starts to matter."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_files(root: Path, package: str = "exporter") -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its __init__.py)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `module` imports anywhere in its file (relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in known:  # `from exporter.vllm import names`: the submodule
                    found.add(f"{base}.{alias.name}")
                elif base in known:  # `from exporter.daemon import Daemon`: the module itself
                    found.add(base)
    found.discard(module)
    return found


def import_graph(root: Path, package: str = "exporter") -> dict[str, set[str]]:
    files = module_files(root, package)
    known = set(files)
    return {module: imports_of(module, path, known) for module, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path that ends where it starts (a -> b -> a), or None. Depth-first, in sorted order."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_the_exporter_has_no_import_cycle():
    graph = import_graph(ROOT)
    assert "exporter.daemon" in graph and graph["exporter.daemon"], "the graph was not read"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_through_a_type_checking_or_lazy_import_is_found(tmp_path):
    pkg = tmp_path / "exporter"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from exporter.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c\n")
    (pkg / "sub" / "c.py").write_text("import exporter.a\n")
    graph = import_graph(tmp_path)
    assert graph["exporter.a"] == {"exporter.b"}
    assert graph["exporter.b"] == {"exporter.sub.c"}
    assert find_cycle(graph) == ["exporter.a", "exporter.b", "exporter.sub.c", "exporter.a"]
    (pkg / "sub" / "c.py").write_text("import os\n")
    assert find_cycle(import_graph(tmp_path)) is None
