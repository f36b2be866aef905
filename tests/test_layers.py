"""Imports point down the layers (runtime <- ops <- eager <- compile / distributed <- registration
<- tools) and no modules import each other in a cycle, counting function-local imports too.
The check reads the source; run it alone with `python -m pytest tests/test_layers.py`."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "torch_neuronx"
LAYERS = [  # (module prefix, layer): the longest matching prefix decides
    ("torch_neuronx.runtime", 0),
    ("torch_neuronx.ops", 1),
    ("torch_neuronx.eager", 2),
    ("torch_neuronx.compile", 3),
    ("torch_neuronx.distributed", 3),
    ("torch_neuronx", 4),  # registration: __init__, _register, device, storage, pinned, _autocast
    ("torch_neuronx.cli", 5),
    ("torch_neuronx.demo", 5),
    ("torch_neuronx.bench", 5),
    ("torch_neuronx.profiling", 5),
]


def layer(module: str) -> int:
    matches = [(len(p), n) for p, n in LAYERS if module == p or module.startswith(p + ".")]
    return max(matches)[1]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules `module` imports anywhere in its body (submodules named by `from X
    import name` count as imports of X.name)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names if a.name.startswith("torch_neuronx"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("torch_neuronx"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)
    return {t for t in targets if t in known and t != module}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def test_imports_point_down_the_layers() -> None:
    upward = sorted(
        f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
        for m, targets in graph().items()
        for t in targets
        if layer(t) > layer(m)
    )
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    edges = graph()
    cycles = [c for c in _components(edges) if len(c) > 1]
    assert not cycles, "modules importing each other: " + "; ".join(" <-> ".join(sorted(c)) for c in cycles)


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
            found.append(component)

    for v in edges:
        if v not in index:
            visit(v)
    return found
