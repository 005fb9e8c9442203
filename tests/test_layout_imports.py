"""The package tree is the data flow: no import circles, and each layer imports only below.

Walks every module's ``import``/``from ... import`` statements (function-level ones too,
since a lazy import is still a dependency) with :mod:`ast`, so the check needs nothing
imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "dvsdk"

#: what each part of the package may import (besides itself); README "Layout of the repository"
ALLOWED = {
    "errors": set(),
    "fsutil": {"errors"},  # check_outputs raises InvalidArgument
    "native": {"__init__"},  # its compiled sibling dvsdk._native
    "hw": {"errors", "native"},
    "cpu": {"errors", "hw"},
    "netprogram": {"errors", "hw"},  # the program's steps, below the container
    "tasks": {"errors", "fsutil"},  # task heads: numpy post-processing, below the container
    "netfile": {"errors", "fsutil", "hw", "driver", "netprogram", "tasks",  # META task
                "__init__"},  # __version__
    "driver": {"errors", "hw"},
    "sim": {"errors", "hw", "native", "driver"},
    "link": {"errors", "hw", "driver", "__init__"},
    "compiler": {"errors", "fsutil", "hw", "cpu", "driver", "netfile", "runtime", "tasks",
                 "__init__"},  # fsutil: compile() refuses an output that is an input
    "runtime": {"errors", "fsutil", "native", "hw", "cpu", "driver", "netfile", "tasks"},
    "cli": {"errors", "fsutil", "native", "hw", "cpu", "driver", "netfile", "runtime",
            "compiler", "link", "sim", "qa", "tasks", "__init__"},
    "qa": {"errors", "fsutil", "hw", "cpu", "driver", "netfile", "runtime", "compiler",
           "link", "sim", "tasks", "__init__"},
    "vx": {"errors", "hw", "cpu", "compiler", "netfile", "runtime", "driver"},
    "__init__": {"driver", "runtime", "compiler"},
}
# dvsdk.apps (frames through a net: sources, sinks, the pipeline) sits on the runtime and
# the task heads; dvsdk-run's video path (cli/stream.py) uses it
ALLOWED["apps"] = {"errors", "fsutil", "runtime", "tasks"}
ALLOWED["cli"] = ALLOWED["cli"] | {"apps"}


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PKG.rglob("*.py"):
        parts = ("dvsdk",) + f.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            edges[m] |= {t for t in targets if t in mods and t != m}
    return edges


def _cycles(edges: dict[str, set[str]], mods: dict[str, Path]) -> list[list[str]]:
    """Circles between modules (a package's ``__init__`` re-exporting its modules is not one)."""
    found, state, stack = [], {}, []

    def visit(v: str) -> None:
        state[v] = 1
        stack.append(v)
        for w in sorted(edges[v]):
            if mods[w].name == "__init__.py":
                continue
            if w not in state:
                visit(w)
            elif state[w] == 1:
                found.append(stack[stack.index(w):] + [w])
        stack.pop()
        state[v] = 2

    for v in sorted(edges):
        if v not in state:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """The package's modules and import edges, parsed once for every test of this file."""
    mods = _modules()
    return mods, _edges(mods)


def _part(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circles(graph):
    mods, edges = graph
    assert _cycles(edges, mods) == []


def test_the_cycle_finder_finds_a_circle():
    """The check itself can fail: a planted circle is found."""
    mods = {"a": Path("a.py"), "b": Path("b.py"), "c": Path("c.py")}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}, mods) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_layer_imports_only_below(graph, part):
    _, edges = graph
    wrong = sorted(f"{m} -> {t}" for m, ts in edges.items() if _part(m) == part
                   for t in ts if _part(t) != part and _part(t) not in ALLOWED[part])
    assert wrong == []


def test_every_part_has_a_rule(graph):
    mods, _ = graph
    assert {_part(m) for m in mods} <= set(ALLOWED)


def test_top_level_holds_only_the_cross_cutting_modules():
    top = sorted(f.stem for f in PKG.glob("*.py"))
    assert top == ["__init__", "errors", "fsutil", "native", "netfile", "netprogram"]


def test_no_module_over_the_size_guide():
    big = {str(f.relative_to(PKG)): n for f in PKG.rglob("*.py")
           if (n := len(f.read_text().splitlines())) > 650}
    assert big == {}
