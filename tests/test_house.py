"""The house's rules, read from the source (README "Where things live"): no import circle in ``state_store``,
no import from a lower floor to a higher one, no Spark in the pure core, ``runtime.py`` only sequencing
(< 300 lines), and no function over 60 lines. Run alone: ``pytest tests/test_house.py``."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "state_store"

# Floors, lowest first: a module imports only from its own floor or below. The pure core runs in the Spark
# executors and in tests without a JVM; the adapters talk to Spark and Delta; the operations are what a user
# runs; the entry points parse what the user typed.
FLOORS = {
    "core": {"catalog", "subtask", "errors", "types", "storage", "key_groups", "descriptors", "sources", "sources.kafka", "sources.base", "sources.files", "sources.delta_cdf", "sources.edge", "records", "keyed_state",
             "operator_state", "functions", "repartition", "subtask.exchange", "subtask.run_files", "subtask.task", "job", "settings",
             "catalog.job_store", "catalog.lease", "registered_states", "restore_plan", "ttl.config", "ttl.handles", "ttl",
             "watermarks", "timers", "side_outputs", "subtask.json_columns", "vectorized", "subtask.vectorized_run", "dataflow"},
    "adapters": {"delta", "spark", "spark.session", "spark.connect", "delta.log", "delta.delta_rs", "spark.worker_daemon", "delta.state_tables", "delta.backends", "delta.points", "ttl.tables", "ttl.cleanup"},
    "operations": {"ops", "run.frame", "run", "run.context", "run.planning", "run.commit", "run.checkpointing", "run.timing", "run.operator_run", "run.runtime",
                   "ops.savepoint", "ops.restore", "ops.compaction", "ops.state_processor", "ops.housekeeping"},
    "entry": {"__init__", "catalog.jobs", "catalog.pipelines", "cli", "entrypoint", "entrypoint.main"},
    "airflow": {"provider", "provider.operators", "provider.dags", "provider.reader", "provider.views", "provider.plugin",
                "provider.hooks"},
}
ORDER = list(FLOORS)
CORE_WITHOUT_SPARK = FLOORS["core"]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1]) if parts[-1] == "__init__" and len(parts) > 1 else ".".join(parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The package modules ``name`` imports, and the top-level third-party packages it imports at module
    level (not inside a function: those are deferred on purpose)."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    inside, outside = set(), set()
    tree = ast.parse(path.read_text())
    top_level = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, (ast.If, ast.Try))
                                              for n in ast.walk(s)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1] if node.level > 1 else package
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                candidate = f"{target}.{alias.name}" if target else alias.name
                inside.add(candidate if candidate in modules else target or "__init__")
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) in top_level:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            outside.update(n.split(".")[0] for n in names)
    return {m for m in inside if m in modules and m != name}, outside


def _graph():
    modules = _modules()
    return modules, {name: _imports(name, path, modules) for name, path in modules.items()}


def _floor(name: str) -> str:
    for floor, names in FLOORS.items():
        if name in names:
            return floor
    raise AssertionError(f"state_store/{name} has no floor in tests/test_house.py FLOORS (and none in the "
                         f"README's 'Where things live'): give it one")


def test_no_import_circle_in_state_store():
    _, graph = _graph()
    edges = {name: inside for name, (inside, _) in graph.items()}
    seen, stack, circles = set(), [], []

    def visit(node, path):
        if node in path:
            circles.append(path[path.index(node):] + [node])
            return
        if node in seen:
            return
        path.append(node)
        for nxt in sorted(edges[node]):
            visit(nxt, path)
        path.pop()
        seen.add(node)

    for name in sorted(edges):
        visit(name, stack)
    assert not circles, f"import circles: {circles}"


def test_every_import_goes_to_the_same_floor_or_below():
    _, graph = _graph()
    upward = [(name, target) for name, (inside, _) in graph.items() for target in inside
              if ORDER.index(_floor(target)) > ORDER.index(_floor(name))]
    assert not upward, f"imports from a lower floor to a higher one: {sorted(upward)}"


def test_the_pure_core_imports_no_spark_at_module_level():
    _, graph = _graph()
    spark = [name for name, (_, outside) in graph.items() if name in CORE_WITHOUT_SPARK
             and outside & {"pyspark", "delta", "py4j"}]
    assert not spark, f"core modules importing Spark when loaded (an executor or a JVM-less test loads them): {spark}"


def test_runtime_only_sequences_and_no_function_is_over_60_lines():
    modules = _modules()
    assert len(modules["run.runtime"].read_text().splitlines()) < 300
    long = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert not long, f"functions over 60 lines: {long}"
