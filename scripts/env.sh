# Sourced by the scripts: the project's interpreter everywhere, and the Delta jars.
ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$ROOT_DIR/.venv/bin:$PATH"
export PYSPARK_PYTHON="$ROOT_DIR/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$ROOT_DIR/.venv/bin/python"
export PYTHONPATH="$ROOT_DIR${PYTHONPATH:+:$PYTHONPATH}"
export LAKESTATE_ROOT="${LAKESTATE_ROOT:-$ROOT_DIR/lakestate-data}"
LAKESTATE_JARS=$(ls "$ROOT_DIR"/.cache/jars/*.jar | tr '\n' ',' | sed 's/,$//')
export LAKESTATE_JARS
