#!/usr/bin/env bash
# Idempotent set-up from nothing: project virtualenv with the pinned packages,
# and the Delta jars from Maven Central. Everything fetched is cached in
# ignored folders (.venv, .cache) so later runs are fast; nothing depends on
# the cache being there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
STAMP=.venv/.lakestate-installed
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
# Reinstalled when the pins or the package's own metadata (its entry points) change. The pip that `venv` bundles
# (23.2) takes about twice as long as this one to resolve and unpack Airflow's tree; tests/e2e/test_package.py installs
# with the same pip, as a user installing the wheel into an Airflow would. The repository's own tree goes in with
# uv: the same 182 packages at the same versions as pip resolves (compared on 2026-11-28), in 63 s instead of
# 165 s from an empty cache, bytecode compiled as pip does (this machine sets PYTHONDONTWRITEBYTECODE).
INSTALLER=pip==26.3
FAST_INSTALLER=uv==0.13.9
install_packages() {
  if [ ! -f "$STAMP" ] || ! cat requirements.txt constraints.txt pyproject.toml | cmp -s - "$STAMP"; then
    echo "[setup] installing pinned packages (requirements.txt)"
    export PIP_CACHE_DIR="$ROOT/.cache/pip" UV_CACHE_DIR="$ROOT/.cache/uv" PIP_DISABLE_PIP_VERSION_CHECK=1
    .venv/bin/python -m pip install -q "$INSTALLER" "$FAST_INSTALLER"
    # constraints.txt holds the whole tree the suite ran with (scripts/constraints.py writes it from this .venv):
    # a fresh clone gets that tree, not what is newest on the day.
    .venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode -r requirements.txt -c constraints.txt
    PYTHONWARNINGS=ignore .venv/bin/pip install -q --no-deps -e .  # setuptools warns of editable installs
    cat requirements.txt constraints.txt pyproject.toml > "$STAMP"
  fi
}
fetch_jars() {  # Maven Central's jars, fetched while pip installs (both mostly wait on the network)
  if ! ls .cache/jars/delta-spark_2.13-*.jar >/dev/null 2>&1; then
    echo "[setup] fetching Delta jars from Maven Central into .cache/jars"
    mkdir -p .cache/jars
    if command -v mvn >/dev/null; then
      mvn -q -B -f scripts/jars-pom.xml -Dmaven.repo.local="$ROOT/.cache/m2" \
        dependency:copy-dependencies -DincludeScope=runtime \
        -DexcludeArtifactIds=scala-library,antlr4-runtime -DoutputDirectory="$ROOT/.cache/jars"
    else  # no Maven: the same two jars straight from Maven Central
      for a in delta-spark_2.13 delta-storage; do
        .venv/bin/python -c "import sys,urllib.request as u; u.urlretrieve(sys.argv[1], sys.argv[2])" \
          "https://repo1.maven.org/maven2/io/delta/$a/4.0.0/$a-4.0.0.jar" ".cache/jars/$a-4.0.0.jar"
      done
    fi
  fi
  # Kafka: Spark's connector beside the Delta jars, and a broker for scripts/kafka.sh (the tests', the demo's), both
  # from Maven Central through Maven (Spark's parent POM names a repository of its own: maven-settings.xml sends
  # every one to Maven Central). Without Maven the rest of the set-up stands and scripts/kafka.sh says what is missing.
  kafka_jars() {  # $1 pom, $2 folder, $3 artifacts to copy (all when empty)
    mvn -q -B -Dstyle.color=never -s scripts/maven-settings.xml -f "scripts/$1" -Dmaven.repo.local="$ROOT/.cache/m2" \
      dependency:copy-dependencies -DincludeScope=runtime ${3:+-DincludeArtifactIds=$3} -DoutputDirectory="$2.part"
    rm -rf "$2.new" && mkdir -p "$2.new" && cp "$2.part"/*.jar "$2.new"/ && rm -rf "$2.part"
  }
  if ! ls .cache/jars/spark-sql-kafka-0-10_2.13-*.jar >/dev/null 2>&1 || [ ! -d .cache/kafka-broker ]; then
    if command -v mvn >/dev/null; then
      if ! ls .cache/jars/spark-sql-kafka-0-10_2.13-*.jar >/dev/null 2>&1; then
        echo "[setup] fetching Spark's Kafka connector from Maven Central into .cache/jars"
        kafka_jars kafka-spark-pom.xml "$ROOT/.cache/kafka-spark" \
          spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2
        mv "$ROOT/.cache/kafka-spark.new"/*.jar .cache/jars/ && rmdir "$ROOT/.cache/kafka-spark.new"
      fi
      if [ ! -d .cache/kafka-broker ]; then
        echo "[setup] fetching a Kafka broker from Maven Central into .cache/kafka-broker"
        kafka_jars kafka-broker-pom.xml "$ROOT/.cache/kafka-broker"
        mv "$ROOT/.cache/kafka-broker.new" .cache/kafka-broker  # only a complete copy gets the name
      fi
    else
      echo "[setup] warning: no Maven (mvn): Spark's Kafka connector and the Kafka broker are not fetched; install" \
        "Maven and run scripts/setup.sh again to read Kafka topics"
    fi
  fi
  # hadoop-aws and the AWS SDK bundle it needs, for warehouses and savepoint roots on s3a:// (Spark adds them to
  # its classpath only when one is configured: the bundle is 530 MiB, and a cluster's executors would copy it).
  S3_JARS=(org/apache/hadoop/hadoop-aws/3.4.1/hadoop-aws-3.4.1.jar software/amazon/awssdk/bundle/2.24.6/bundle-2.24.6.jar)
  mkdir -p .cache/jars-s3
  for j in "${S3_JARS[@]}"; do
    f=.cache/jars-s3/$(basename "$j")
    if [ ! -f "$f" ]; then
      echo "[setup] fetching $(basename "$j") from Maven Central into .cache/jars-s3"
      .venv/bin/python - "https://repo1.maven.org/maven2/$j" "$f" <<'PY'
import hashlib, os, sys, urllib.request as u
url, target = sys.argv[1], sys.argv[2]
tmp = target + ".part"
u.urlretrieve(url, tmp)
want = u.urlopen(url + ".sha1").read().decode().split()[0]
digest = hashlib.sha1()
with open(tmp, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
got = digest.hexdigest()
if got != want:
    os.remove(tmp)
    sys.exit(f"[setup] {url}: sha1 {got} is not Maven Central's {want}; run set-up again")
os.replace(tmp, target)  # only a complete, verified jar gets the name
PY
    fi
  done
}
mkdir -p .cache
fetch_jars > .cache/setup-jars.log 2>&1 &
jars=$!
install_packages
jars_status=0
wait $jars || jars_status=$?
cat .cache/setup-jars.log
[ $jars_status -eq 0 ] || { echo "[setup] fetching the jars failed (above); run scripts/setup.sh again"; exit 1; }
# The trap: pyspark-client can overwrite files of the full pyspark. Prove both import.
.venv/bin/python - <<'PY'
import importlib.util, pyspark, delta, pyarrow, pandas
from pyspark.sql import SparkSession  # fails if pyspark-client clobbered pyspark
import importlib.metadata as md
assert importlib.util.find_spec("airflow") and md.version("apache-airflow-providers-apache-spark")
assert pyspark.__version__ == "4.0.1", pyspark.__version__
PY
bash scripts/class-archive.sh  # Spark drivers start about 7 s sooner with it; made once
echo "[setup] ready: $(.venv/bin/python -c 'import importlib.metadata as m;print(*(f"{p} {m.version(p)}" for p in ("pyspark","delta-spark","apache-airflow")), sep=", ")'), jars: $(ls .cache/jars | tr '\n' ' ')"
