"""What the package declares is what its code imports (no JVM): every third-party import of ``state_store/`` is a
dependency of pyproject.toml (the core ones, or the extra its module or import belongs to), so an installed wheel
never stops on a ModuleNotFoundError; and ``constraints.txt``, the file the README passes to ``pip install -c``,
is ``requirements.txt`` as pip accepts it in a constraints file."""
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


def _without_extras(text: str) -> str:
    return re.sub(r"\[[^\]]*\]", "", text)


def test_constraints_txt_is_requirements_txt_without_the_extras_pip_refuses_in_constraints():
    constraints = (REPO / "constraints.txt").read_text()
    header, _, body = constraints.partition("\n\n")
    assert header.startswith("#") and body == _without_extras((REPO / "requirements.txt").read_text()), (
        "constraints.txt must be its header, a blank line, then requirements.txt with every `[extra]` removed: "
        "regenerate it after editing requirements.txt")
    assert "[" not in body
