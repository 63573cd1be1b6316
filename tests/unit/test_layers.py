"""The layers import downward only, and no module imports itself back through others (issue 31).

Every module of orchestrator/ and workloads/ is parsed, not imported: an import counts wherever
it is written (at the top, inside a function, under `if TYPE_CHECKING:`), since a lazy import is
still a dependency, only a later one."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "workloads")
FACES = "orchestrator.commands"  # the command line's face; api.py is the other


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _known(name: str) -> str | None:
    """The project module `name` is, or lies in (its longest known prefix); None outside the project."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str) -> set[str]:
    """The project modules that `module` imports, at any depth of its code."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from a import b`: b is the module a.b where there is one, else a name in a
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        out.update(m for m in map(_known, names) if m and m != module)
    return out


GRAPH = {m: _imports(m) for m in MODULES}


def _is_face(module: str) -> bool:
    return module == FACES or module.startswith(FACES + ".")


def test_the_graph_is_read():
    assert len(MODULES) > 50 and "orchestrator.operations.report" in GRAPH["orchestrator.commands.report"]
    assert "orchestrator.commands.report" in GRAPH["orchestrator.cli"]


def test_nothing_below_the_command_line_imports_it():
    upward = sorted(f"{m} imports {t}" for m, targets in GRAPH.items() if not _is_face(m) and m != "orchestrator.cli"
                    for t in targets if _is_face(t))
    assert upward == []


def test_the_api_imports_no_command():
    assert sorted(t for t in GRAPH["orchestrator.api"] if _is_face(t) or t == "orchestrator.cli") == []


def test_nothing_under_the_use_cases_imports_them():
    """Issue 43: operations/ is the one layer of use cases, over the Ray port (execution/), the
    results store, the planner and the judges; none of those imports an operation (watch, a
    composite of operations, is one itself)."""
    below = ("orchestrator.execution", "orchestrator.results", "orchestrator.sweep", "orchestrator.analysis",
             "orchestrator.judging", "orchestrator.doctor", "orchestrator.lab", "workloads")
    upward = sorted(f"{m} imports {t}" for m, targets in GRAPH.items() if m.startswith(below)
                    for t in targets if t == "orchestrator.operations" or t.startswith("orchestrator.operations."))
    assert upward == []


# What a face may import of the driver (issue 43): the use cases (the options' declaration too,
# through operations.sweeps), the errors, and the faces' own modules (the command line's parsers and
# renderers). The worker
# package (workloads/) is not the driver: a face may name its collectives in a help.
FACE_MAY_IMPORT = ("orchestrator.operations", "orchestrator.errors", FACES, "workloads")


def _may(target: str, allowed: tuple[str, ...]) -> bool:
    return any(target == a or target.startswith(a + ".") for a in allowed)


def test_the_faces_import_only_the_use_cases():
    faces = [m for m in GRAPH if _is_face(m)] + ["orchestrator.api", "orchestrator.cli"]
    past = sorted(f"{m} imports {t}" for m in faces for t in GRAPH[m]
                  if not _may(t, FACE_MAY_IMPORT) and t != "orchestrator")  # the package: its __version__
    assert past == []


def test_the_face_rule_catches_a_face_that_reaches_past_the_use_cases():
    """The rule read on the tree of 0ec585a's kind: a face calling the Ray port directly fails it."""
    assert not _may("orchestrator.execution.jobs", FACE_MAY_IMPORT)
    assert not _may("orchestrator.operationsx", FACE_MAY_IMPORT)
    assert _may("orchestrator.operations.run", FACE_MAY_IMPORT) and _may("orchestrator.commands.render", FACE_MAY_IMPORT)


def test_the_use_cases_import_no_face():
    above = ("orchestrator.api", "orchestrator.cli", FACES)
    upward = sorted(f"{m} imports {t}" for m, targets in GRAPH.items() if m.startswith("orchestrator.operations")
                    for t in targets if any(t == a or t.startswith(a + ".") for a in above))
    assert upward == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_back():
    assert _cycles(GRAPH) == []


MAX_LINES = 300


def _planned_splits() -> dict[str, int]:
    """docs/SPLITS.md's rows: module path -> the lines it may have until it is split."""
    rows = {}
    for line in (ROOT / "docs" / "SPLITS.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].endswith(".py"):
            rows[cells[0]] = int(cells[1])
    return rows


def test_a_module_over_300_lines_has_a_split_planned_and_does_not_grow():
    """Issue 43: a size rule, not an excuse sentence: a module over MAX_LINES is listed in
    docs/SPLITS.md with its cap and planned split, stays within the cap, and leaves the list once
    it is split."""
    planned = _planned_splits()
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in MODULES.values()}
    unplanned = sorted(f"{m} ({n} lines)" for m, n in sizes.items() if n > MAX_LINES and m not in planned)
    grown = sorted(f"{m} ({sizes[m]} lines, cap {cap})" for m, cap in planned.items() if sizes.get(m, 0) > cap)
    stale = sorted(m for m in planned if sizes.get(m, 0) <= MAX_LINES)
    excuses = sorted(m for m, path in MODULES.items() if "Size: over 300 lines" in path.read_text())
    assert (unplanned, grown, stale, excuses) == ([], [], [], [])
    assert len(planned) >= 8  # the table was read (8 rows when ras.py and harness.py were split)


def test_every_workload_beside_the_collectives_runs_through_its_registered_hook():
    """The harness and the worker never branch on a case's kind: overlap and replay are found by name
    in the registry (each module registers itself on import), as the collectives are."""
    from workloads import harness, registry

    for name in registry.RUNNERS:
        workload = registry.workload(name)
        assert workload.name == name and callable(workload.run)
    assert registry.workload("all_reduce") is None  # a collective: the harness' own measure
    import workloads.worker as worker

    for module in (harness, worker):
        text = open(module.__file__).read()
        assert "case.replay" not in text and "OVERLAP" not in text and "REPLAY" not in text, module.__name__
