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
# Reinstalled when the pins or the package's own metadata (its entry points) change.
if [ ! -f "$STAMP" ] || ! cat requirements.txt pyproject.toml | cmp -s - "$STAMP"; then
  echo "[setup] installing pinned packages (requirements.txt)"
  PIP_CACHE_DIR="$ROOT/.cache/pip" .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  PIP_CACHE_DIR="$ROOT/.cache/pip" .venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
  cat requirements.txt pyproject.toml > "$STAMP"
fi
# The trap: pyspark-client can overwrite files of the full pyspark. Prove both import.
.venv/bin/python - <<'PY'
import importlib.util, pyspark, delta, pyarrow, pandas
from pyspark.sql import SparkSession  # fails if pyspark-client clobbered pyspark
import importlib.metadata as md
assert importlib.util.find_spec("airflow") and md.version("apache-airflow-providers-apache-spark")
assert pyspark.__version__ == "4.0.1", pyspark.__version__
PY
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
echo "[setup] ready: $(.venv/bin/python -c 'import importlib.metadata as m;print(*(f"{p} {m.version(p)}" for p in ("pyspark","delta-spark","apache-airflow")), sep=", ")'), jars: $(ls .cache/jars | tr '\n' ' ')"
