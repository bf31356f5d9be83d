"""The product's import graph has no cycle, not even through TYPE_CHECKING imports (issue 45): `lint-imports`
holds the layers, this holds the modules within a layer. grimp is import-linter's own graph builder."""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

import metrics_sched.plugins


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.find_modules_directly_imported_by(target)))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_product_imports_form_no_cycle() -> None:
    graph = grimp.build_graph("metrics_sched", "adapters")
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert cycles(graph) == [["a.x", "a.y"]]


def test_the_independence_contract_lists_every_plugin() -> None:
    """pyproject's "Plugins are independent of each other" names each plugin folder (a wildcard would take in the
    shared storage library plugins/volumes): a plugin added without being listed there fails here."""
    root = Path(metrics_sched.plugins.__file__).parent
    pyproject = tomllib.loads((root.parents[1] / "pyproject.toml").read_text())
    contract = next(c for c in pyproject["tool"]["importlinter"]["contracts"] if c["type"] == "independence")
    folders = {f"metrics_sched.plugins.{d.name}" for d in root.iterdir() if (d / "plugin.py").is_file()}
    assert set(contract["modules"]) == folders
