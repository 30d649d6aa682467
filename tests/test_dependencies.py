"""What the package declares is what its code imports (no JVM): every third-party import of ``state_store/`` is a
dependency of pyproject.toml (the core ones, or the extra its module or import belongs to), so an installed wheel
never stops on a ModuleNotFoundError; and ``constraints.txt``, the file the README passes to ``pip install -c``,
is ``requirements.txt`` as pip accepts it in a constraints file, then the rest of the tree the suite runs on."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "state_store"

# Import name (or a dotted prefix: the longest one wins) -> distribution. An import missing here fails the test:
# map it, and declare the distribution in pyproject.toml.
DISTRIBUTIONS = {
    "pyspark": "pyspark", "delta": "delta-spark", "deltalake": "deltalake", "pyarrow": "pyarrow",
    "pandas": "pandas", "numpy": "numpy", "orjson": "orjson", "croniter": "croniter", "yaml": "pyyaml",
    "typing_extensions": "typing-extensions", "sqlglot": "sqlglot",
    "airflow": "apache-airflow", "airflow.providers.apache.spark": "apache-airflow-providers-apache-spark",
    "airflow.providers.standard": "apache-airflow-providers-standard",
    "airflow.providers.openlineage": "apache-airflow-providers-openlineage", "openlineage": "openlineage-python",
    "attr": "attrs",
    "fastapi": "fastapi", "sqlalchemy": "sqlalchemy",
    "boto3": "boto3", "botocore": "botocore", "confluent_kafka": "confluent-kafka", "grpc": "grpcio",
}
# Imports an extra may bring instead of the core dependencies: the modules only that extra's users import.
EXTRA_OF_IMPORT = {"boto3": "s3", "botocore": "s3", "confluent_kafka": "kafka", "grpc": "connect",
                   "airflow.providers.openlineage": "lineage", "openlineage": "lineage", "attr": "lineage"}
EXTRA_OF_MODULE = {"provider": "airflow"}  # state_store/provider/ runs inside Airflow only


def _imports(path: Path) -> set[str]:
    """The absolute, non-standard-library imports of one module (those inside functions too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] not in sys.stdlib_module_names | {"state_store", "__future__"}}


def _distribution(name: str) -> str | None:
    prefixes = [p for p in DISTRIBUTIONS if name == p or name.startswith(p + ".")]
    return DISTRIBUTIONS[max(prefixes, key=len)] if prefixes else None


def _names(requirements: list[str]) -> set[str]:
    """The distributions of PEP 508 requirement strings, normalised (``delta_spark`` is ``delta-spark``)."""
    return {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", r).group()).lower() for r in requirements}


def test_every_third_party_import_of_state_store_is_a_declared_dependency_of_the_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core, extras = _names(project["dependencies"]), {k: _names(v) for k, v in
                                                      project["optional-dependencies"].items()}
    undeclared = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE)
        for name in sorted(_imports(path)):
            dist = _distribution(name)
            allowed = set(core)
            of_import = [p for p in EXTRA_OF_IMPORT if name == p or name.startswith(p + ".")]
            for extra in (EXTRA_OF_MODULE.get(module.parts[0]),
                          EXTRA_OF_IMPORT[max(of_import, key=len)] if of_import else None):
                allowed |= extras.get(extra, set())
            if dist is None or dist not in allowed:
                undeclared.append(f"state_store/{module}: import {name} ({dist or 'no distribution mapped'})")
    assert not undeclared, "imported but not declared in pyproject.toml:\n" + "\n".join(undeclared)


def test_constraints_txt_is_requirements_txt_then_the_whole_tree_the_suite_runs_on():
    """constraints.txt is what scripts/constraints.py writes: requirements.txt, the project's own pins, without the
    extras pip refuses in constraints, then every other distribution of this environment (the suite's .venv) at
    its version, so ``pip install -c constraints.txt`` gives a user Airflow's tree as tested (a user once got
    SQLAlchemy 2.1, under which every ``airflow`` command warns); and no SQLAlchemy of 2.1 or later."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import constraints
    finally:
        sys.path.remove(str(REPO / "scripts"))
    requirements = (REPO / "requirements.txt").read_text()
    text = (REPO / "constraints.txt").read_text()
    expected = constraints.constraints_text(requirements, constraints.installed())
    body = text.partition("\n\n")[2]
    assert body.startswith(constraints.without_extras(requirements)) and "[" not in body.split("\n# The rest")[0]
    assert text == expected, (
        "constraints.txt is not requirements.txt and this environment's tree: after editing requirements.txt, "
        "install it (scripts/setup.sh) and run `.venv/bin/python scripts/constraints.py`; differing pins: "
        + str(sorted(set(text.splitlines()) ^ set(expected.splitlines()))[:20]))
    (sqlalchemy,) = re.findall(r"(?m)^sqlalchemy==(\d+)\.(\d+)", text)
    assert tuple(map(int, sqlalchemy)) < (2, 1), "Airflow 3.1 warns at every command under SQLAlchemy 2.1"
