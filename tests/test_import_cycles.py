"""No import circle among the project's modules (tests aside).

A circle makes two modules one: neither can be read, tested or moved without the other, and
which half runs first depends on who imported first. The packages are import-linter's root
packages (.importlinter), so a package added there is checked here too. Imports made inside a
function or under TYPE_CHECKING count: they close a circle just the same, only later.
"""

from __future__ import annotations

import configparser
from itertools import pairwise
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def _root_packages() -> list[str]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    return config["importlinter"]["root_packages"].split()


def _circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, without recursion)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & graph.modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if child < len(edges[node]):
                work.append((node, child + 1))
                nxt = edges[node][child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _described(graph: grimp.ImportGraph, circle: list[str]) -> str:
    """One way round the circle, each import with the line that makes it."""
    first = circle[0]
    # Some member imports the first; every chain between two members stays inside the circle.
    path = next(
        chain
        for other in circle[1:]
        if graph.direct_import_exists(importer=other, imported=first)
        and (chain := graph.find_shortest_chain(importer=first, imported=other)) is not None
    )
    steps = [*path, first]
    lines = []
    for importer, imported in pairwise(steps):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = f" (line {details[0]['line_number']})" if details else ""
        lines.append(f"  {importer} imports {imported}{where}")
    return "\n".join(lines)


def test_no_module_imports_itself_through_others() -> None:
    graph = grimp.build_graph(*_root_packages(), cache_dir=None)
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n\n".join(_described(graph, c) for c in circles)


def test_the_check_finds_a_circle_and_says_where_it_runs() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("a.x", "a.y"),
        ("a.y", "a.z"),
        ("a.z", "a.x"),
        ("a.z", "a.w"),
        ("a.w", "a.v"),
    ]:
        graph.add_import(importer=importer, imported=imported, line_number=3, line_contents="import")
    circles = _circles(graph)
    assert circles == [["a.x", "a.y", "a.z"]]
    assert _described(graph, circles[0]).splitlines() == [
        "  a.x imports a.y (line 3)",
        "  a.y imports a.z (line 3)",
        "  a.z imports a.x (line 3)",
    ]
