"""The house's rules, read from the source (docs/internals/where-things-live.md): each folder of ``state_store`` is
a wing that may import only the wings its row below names, no import circle between modules, no loop between wings
except through ``state/``, at most 22 modules at the top level, no Spark when the pure wings load, ``run/runtime.py``
only sequencing (< 300 lines), and no function over 60 lines. Run alone: ``pytest tests/test_house.py``."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "state_store"

# A module's wing is its first folder under state_store/; a top-level module is the user API and pure model
# ("model"), except the package's face, ``__init__`` ("face"), and the CLI ("door"), which every command goes
# through. Lowest first: the model and its two
# faces (sources/, ttl/) run in the Spark executors and in tests without a JVM; subtask/ is the executor half
# of a run; catalog/ a job's files and who holds it; spark/ the session; delta/ the state tables; run/ and
# ops/ what a user runs; the door, the entry point and the Airflow provider parse what the user typed. A new
# module in a wing needs no edit here; a new wing needs a row.
MAY_IMPORT = {
    # ops: the State Processor API, delta: DeltaSink, each loaded when asked for
    "face": {"model", "sources", "state", "ops", "delta", "windows", "joins", "tables", "sql"},
    # windows, joins, tables: dataflow.py's window(...), connect(...), interval_join(...) and aggregate(...) (none
    # of theirs imports it)
    "model": {"records", "sources", "state", "windows", "joins", "tables"},
    # The model's typed records (the state tables' layout, a run's stats, the catalog's metadata): a package of the
    # model, imported wherever the model is (below).
    "records": {"model", "sources", "state"},
    "windows": {"model", "state"},  # state: the windows' descriptors
    "joins": {"model", "windows", "state"},  # the window join runs a window operator
    "tables": {"model", "windows", "state"},  # updating results: the group aggregate folds a ColumnAggregate
    # SQL: compiled to the model's operators (windows', tables'); an updating result's sink is delta's upsert sink;
    # joins: the interval join; catalog: a registry entry's table of another source names its factory
    "sql": {"model", "sources", "state", "windows", "joins", "tables", "delta", "catalog"},
    # State as Flink's runtime/state: descriptors, the keyed store and handles, operator state, TTL (ttl/: its
    # Spark side, tables and cleanup, reads the records).
    "state": {"model"},
    "sources": {"model"},
    "subtask": {"model", "state", "sources", "windows"},  # sources: the sink's microbatch column (SINK_MICROBATCH);
    # windows: the assigners' columnar form, which the vectorised window runs
    "catalog": {"model", "state"},  # state: the backends' kinds (which a pipeline may choose)
    "spark": {"model"},
    # state: the kinds its backends implement; tables: the upsert sink reads a changelog's kinds
    "delta": {"model", "state", "catalog", "subtask", "spark", "tables"},
    "run": {"model", "state", "sources", "subtask", "catalog", "spark", "delta"},
    "ops": {"model", "state", "catalog", "spark", "delta"},
    "door": {"model", "state", "sources", "subtask", "catalog", "spark", "delta", "run", "ops", "sql"},
    "entrypoint": {"door"},
    "provider": {"model", "door", "entrypoint", "catalog", "delta", "ops", "spark"},
}
for _row in MAY_IMPORT.values():
    if "model" in _row:
        _row.add("records")
# The only wing allowed in a loop with the top-level modules: the model's functions hand out state handles and
# the state's handles read the model's types (Flink's runtime/state and its operators are one module there);
# TTL decorates the handles and the records carry its config.
LOOP_WING = "state"
# Loaded without Spark, Delta or py4j (a subtask's executor, a JVM-less test, a DAG parse): these wings, and
# these modules of state/ (state/ttl/tables.py and state/ttl/cleanup.py are its Spark side).
NO_SPARK_WINGS = {"face", "model", "records", "sources", "subtask", "catalog", "windows", "joins", "tables",
                  "sql"}
NO_SPARK_MODULES = {"state", "state.backend", "state.codecs", "state.descriptors", "state.store", "state.handles",
                    "state.operator", "state.ttl", "state.ttl.config", "state.ttl.handles", "state.ttl.rules"}
SPARK = {"pyspark", "delta", "py4j"}
MAX_TOP_LEVEL = 22


def _modules() -> dict[str, Path]:
    """Every module by dotted name under ``state_store`` (a package by its folder's name, the package itself
    as ``__init__``)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 1 else ".".join(parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str], set[str]]:
    """The package modules ``name`` imports (relative and absolute, deferred ones included), the ones of them
    it imports when loaded (module level), and the third-party packages it imports when loaded."""
    package = name.split(".") if path.name == "__init__.py" and name != "__init__" else name.split(".")[:-1]
    inside, at_load, outside = set(), set(), set()
    tree = ast.parse(path.read_text())
    top_level = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, (ast.If, ast.Try))
                                              for n in ast.walk(s)}
    for node in ast.walk(tree):
        found = set()
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "state_store"):
            if node.level:
                target = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module.partition(".")[2]
            for alias in node.names:
                candidate = f"{target}.{alias.name}" if target else alias.name
                found.add(candidate if candidate in modules else target or "__init__")
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "state_store" for a in node.names):
            found = {a.name.partition(".")[2] or "__init__" for a in node.names if a.name.startswith("state_store")}
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) in top_level:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            outside.update(n.split(".")[0] for n in names)
        found = {m for m in found if m in modules and m != name}
        inside |= found
        if id(node) in top_level:
            at_load |= found
    return inside, at_load, outside


def _graph():
    modules = _modules()
    return modules, {name: _imports(name, path, modules) for name, path in modules.items()}


def _wing(name: str, modules: dict[str, Path]) -> str:
    if "." in name or (modules[name].name == "__init__.py" and name != "__init__"):
        return name.split(".")[0]
    return {"cli": "door", "__init__": "face"}.get(name, "model")


def _node(name: str, modules: dict[str, Path]) -> str:
    """A top-level module is a node of its own; a wing's modules are one node, the wing."""
    wing = _wing(name, modules)
    return name if wing in ("face", "model", "door") else wing


def _loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan's)."""
    index, low, stack, on, parts = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return parts


def test_each_wing_imports_only_the_wings_its_row_allows():
    modules, graph = _graph()
    wings = {_wing(name, modules) for name in modules}
    assert wings <= set(MAY_IMPORT), (f"state_store/ has wings {sorted(wings - set(MAY_IMPORT))} with no row in "
                                      f"tests/test_house.py MAY_IMPORT (nor in README's 'Where things live'): give "
                                      f"each a row")
    wrong = sorted(f"{name} ({_wing(name, modules)}) -> {target} ({_wing(target, modules)})"
                   for name, (inside, _, _) in graph.items() for target in inside
                   if _wing(target, modules) != _wing(name, modules)
                   and _wing(target, modules) not in MAY_IMPORT[_wing(name, modules)])
    assert not wrong, f"imports a wing's row does not allow: {wrong}"


def test_no_import_circle_in_state_store():
    _, graph = _graph()
    circles = _loops({name: inside for name, (inside, _, _) in graph.items()})
    assert not circles, f"import circles: {circles}"


def test_no_loop_between_top_level_modules_and_wings_but_through_ttl():
    modules, graph = _graph()
    edges: dict[str, set[str]] = {}
    for name, (inside, _, _) in graph.items():
        node = _node(name, modules)
        edges.setdefault(node, set()).update(_node(t, modules) for t in inside if _node(t, modules) != node)
    without = {v: {w for w in ws if w != LOOP_WING} for v, ws in edges.items() if v != LOOP_WING}
    assert not _loops(without), f"loops between top-level modules and wings not through {LOOP_WING}/: " \
                                f"{_loops(without)}"


def test_the_top_level_holds_at_most_22_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} modules at state_store/'s top level: give some a wing: {top}"


def test_the_pure_wings_load_no_spark():
    modules, graph = _graph()
    pure = [n for n in modules if _wing(n, modules) in NO_SPARK_WINGS or n in NO_SPARK_MODULES]
    spark = []
    for name in pure:
        # What loading it loads: its packages' __init__ and what each loaded module imports at module level.
        todo = [name] + [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)] + ["__init__"]
        seen = set()
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m][1])
        spark += [f"{name} (through {m})" for m in sorted(seen) if graph[m][2] & SPARK]
    assert not spark, f"modules loading Spark when loaded (an executor or a JVM-less test loads them): {spark}"


def test_runtime_only_sequences_and_no_function_is_over_60_lines():
    modules = _modules()
    assert len(modules["run.runtime"].read_text().splitlines()) < 300
    long = []
    for _name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not long, f"functions over 60 lines: {long}"
