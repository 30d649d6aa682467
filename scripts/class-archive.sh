#!/usr/bin/env bash
# The JVM's class archive (Java's AppCDS) for Spark's driver: every spark-submit, in-process SparkSession and
# Spark Connect server loads some 15,000 classes (Spark, Delta, Hadoop) before it does any work. Mapped from an
# archive they load about 7 s sooner on this kind of machine (bench/README.md, "Cold JVMs"). Made once by a
# training run of the demo job (a run, a savepoint, a rescale, a run at the new parallelism) under
# -XX:ArchiveClassesAtExit, kept in .cache/class-archive/ with the key it was made for (the Java, PySpark and
# jars); scripts/env.sh then gives SPARK_SUBMIT_OPTS -XX:SharedArchiveFile. Called by scripts/setup.sh; does
# nothing while the key holds. A JVM that cannot use the archive (another Java, other jars) loads its classes as
# before, silently: nothing depends on the archive being there.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.cache/class-archive
key="$(java -version 2>&1 | head -1) | pyspark $(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)') | $(ls .cache/jars)"
if [ -f "$dir/spark.jsa" ] && [ "$(cat "$dir/key" 2>/dev/null)" = "$key" ]; then
  exit 0
fi
mkdir -p "$dir"
rm -f "$dir/spark.jsa" "$dir/key"
source scripts/env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
echo "[setup] training the JVM's class archive (once: a run of the demo job)"
export LAKESTATE_ROOT="$work/root" LAKESTATE_REGISTRY="$work/lakestate.toml"
# C1 alone: the classes loaded are the same, the JIT compiling for this one short run half the CPU.
export SPARK_SUBMIT_OPTS="-XX:ArchiveClassesAtExit=$work/spark.jsa -XX:TieredStopAtLevel=1 -Xlog:cds=off -Xlog:cds+dynamic=off"
printf '[jobs.clicks]\nentrypoint = "demo.clicks:job"\n' > "$LAKESTATE_REGISTRY"
python -m demo.generate --files 2 --events 500 --keys 200 >/dev/null
if python - > "$work/training.log" 2>&1 <<'PY'
from pyspark import SparkContext
from pyspark.sql import SparkSession

from state_store import cli

for argv in (["run", "--job", "clicks", "--registry"], ["savepoint", "clicks"],
             ["rescale", "clicks", "--parallelism", "3"], ["run", "--job", "clicks", "--registry"]):
    assert cli.main(argv) == 0, argv
jvm = SparkContext._gateway.proc
SparkSession.getActiveSession().stop()
jvm.stdin.close()  # the JVM exits as it does when Python does, and writes the archive on its way out
jvm.wait(timeout=300)
PY
then
  if [ -s "$work/spark.jsa" ]; then
    mv "$work/spark.jsa" "$dir/spark.jsa"
    echo "$key" > "$dir/key"
    echo "[setup] class archive made in $(( $(date +%s) - started )) s: $dir/spark.jsa"
    exit 0
  fi
fi
# Not worth stopping the set-up for: every JVM still runs, only slower to start.
echo "[setup] no class archive could be made (JVMs start without one); the training run said:"
tail -20 "$work/training.log"
