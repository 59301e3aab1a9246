"""The house's floors (docs/harness.md, "Layout"): no import circle among batchproof's modules,
and no module imports from a floor above its own.

    floor 0   reference/, impl/                      the oracles, the fast versions
    floor 1   the core: registry, checks, compare, report, profiles, placements, blocks,
              models, strategies, regimes, statuses, plugin, fuzz_targets, ops/
    floor 2   adapters/                              the engine and the framework adapters
    floor 3   mutation/, perf/, api                  built on the core and the adapters
    floor 4   cli/, the package's face (__init__, __main__)

Read from the source as text (every `import` statement, at the top of a module or inside a
function: a lazy import is still a dependency), the way the package is installed: `harness/` is
`batchproof`, `impl/` and `reference/` its subpackages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"harness": "batchproof", "impl": "batchproof.impl", "reference": "batchproof.reference"}
FLOORS = {"reference": 0, "impl": 0, "adapters": 2, "mutation": 3, "perf": 3, "api": 3, "cli": 4,
          "": 4, "__main__": 4}  # "": the package's __init__; any other name: the core, floor 1


def modules() -> dict[str, Path]:
    """Every module's installed name → its file."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The batchproof modules `name` imports (the longest known prefix of each imported name)."""
    def module(dotted: str) -> str:
        while dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {module(a.name) for a in node.names if a.name.startswith("batchproof")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            if base.startswith("batchproof"):
                found |= {module(f"{base}.{a.name}") for a in node.names}
    return found - {name, ""}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def floor(name: str) -> int:
    parts = name.split(".")
    return FLOORS.get(parts[1] if len(parts) > 1 else "", 1)


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle() -> None:
    assert circles(graph()) == []


def test_no_import_from_a_higher_floor() -> None:
    upward = sorted(f"{a} (floor {floor(a)}) imports {b} (floor {floor(b)})"
                    for a, targets in graph().items() for b in targets if floor(b) > floor(a))
    assert upward == []


@pytest.mark.parametrize(("importer", "source", "expected"), [
    ("batchproof.x", "from batchproof.mutation import zoo\n", "batchproof.mutation.zoo"),
    ("batchproof.x", "def f():\n    from batchproof.cli import main\n", "batchproof.cli"),
    ("batchproof.x", "import batchproof.impl.sft as s\n", "batchproof.impl.sft"),
    ("batchproof.x", "from . import registry\n", "batchproof.registry"),
    ("batchproof.ops.x", "from ..registry import Case\n", "batchproof.registry"),
])
def test_imports_are_read_lazy_relative_and_dotted(tmp_path, importer, source, expected) -> None:
    """The reader the two tests rely on sees imports inside functions, relative imports and
    dotted names (else a circle or an upward import could hide from it)."""
    path = tmp_path / "x.py"
    path.write_text(source)
    assert imports(importer, path, modules()) == {expected}


def test_the_checks_see_a_planted_circle_and_an_upward_import() -> None:
    edges = graph()
    edges["batchproof.registry"] = edges["batchproof.registry"] | {"batchproof.cli"}
    assert any("batchproof.registry" in c for c in circles(edges))
    assert floor("batchproof.registry") < floor("batchproof.cli")
