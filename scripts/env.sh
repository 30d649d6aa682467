# Sourced by the scripts: the project's interpreter everywhere, and the Delta jars.
ROOT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$ROOT_DIR/.venv/bin:$PATH"
export PYSPARK_PYTHON="$ROOT_DIR/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$ROOT_DIR/.venv/bin/python"
export PYTHONPATH="$ROOT_DIR${PYTHONPATH:+:$PYTHONPATH}"
export LAKESTATE_ROOT="${LAKESTATE_ROOT:-$ROOT_DIR/lakestate-data}"
LAKESTATE_JARS=$(ls "$ROOT_DIR"/.cache/jars/*.jar | tr '\n' ',' | sed 's/,$//')
export LAKESTATE_JARS
# Airflow on the embedded default: its home (SQLite database, logs) in an ignored folder, this project's
# DAGs, plugin and pipeline registry; no example DAGs.
export AIRFLOW_HOME="${AIRFLOW_HOME:-$ROOT_DIR/airflow-home}"
export AIRFLOW__CORE__DAGS_FOLDER="$ROOT_DIR/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$ROOT_DIR/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export LAKESTATE_REGISTRY="${LAKESTATE_REGISTRY:-$ROOT_DIR/lakestate.toml}"
# The JVM's class archive (scripts/class-archive.sh, made by the set-up): Spark's drivers start about 7 s sooner.
# A JVM that cannot use it (another Java or jars) runs as it would without it, and says nothing.
if [ -f "$ROOT_DIR/.cache/class-archive/spark.jsa" ]; then
  case " ${SPARK_SUBMIT_OPTS:-} " in
    *" -XX:SharedArchiveFile="*) ;;
    *) export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }-XX:SharedArchiveFile=$ROOT_DIR/.cache/class-archive/spark.jsa -Xlog:cds=off -Xlog:cds+dynamic=off" ;;
  esac
fi
