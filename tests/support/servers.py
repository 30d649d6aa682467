"""The servers e2e tests start, each by the project's own script or command, on 127.0.0.1 and free ports, in a
folder of its own, and stopped at the end of the module that asked for it: a Kafka broker (scripts/kafka.sh),
an S3 server (moto's) and a Spark standalone cluster of two workers (scripts/spark-cluster.sh). tests/conftest.py
makes them fixtures of every module."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import cpu_seconds, environ, file_sizes, process_group, run_advancing, wait_advancing
from tests.support.ports import free_port_run, free_ports

ROOT = Path(__file__).resolve().parents[2]
S3_BUCKET = "lakestate-it"


def script(name: str, command: str, env: dict) -> subprocess.CompletedProcess:
    """``scripts/<name>.sh <command>`` in ``env``, its output captured; waited for while it advances (its output,
    its server's folder and its processes' CPU: a JVM starting), not for a fixed 180 s as before (issue 59)."""
    folder = {"kafka": "LAKESTATE_KAFKA_DIR", "spark-cluster": "LAKESTATE_CLUSTER_DIR"}.get(name)
    return run_advancing(["bash", str(ROOT / "scripts" / f"{name}.sh"), command], f"scripts/{name}.sh {command}",
                         watch=[env[folder]] if folder in env else [], env=env)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker of this module's own (a free port, a fresh folder), stopped at its end: stop must leave no
    process and say so idempotently."""
    port = free_port_run(2)
    env = {**os.environ, "LAKESTATE_KAFKA_DIR": str(tmp_path_factory.mktemp("kafka")),
           "LAKESTATE_KAFKA_PORT": str(port)}
    started = script("kafka", "start", env)
    assert started.returncode == 0, started.stdout + started.stderr
    pid = (Path(env["LAKESTATE_KAFKA_DIR"]) / "broker.pid").read_text().strip()
    yield {"bootstrap": f"127.0.0.1:{port}", "env": env, "pid": pid}
    stopped = script("kafka", "stop", env)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert subprocess.run(["kill", "-0", pid], capture_output=True).returncode != 0, "the broker outlived stop"
    assert script("kafka", "status", env).returncode == 1
    assert script("kafka", "stop", env).returncode == 0  # idempotent


@pytest.fixture(scope="module")
def s3(spark, tmp_path_factory):
    """An S3 server on 127.0.0.1 with one bucket (S3_BUCKET); the AWS variables point at it while the module
    runs, and the shared session's ``s3a://`` reaches it."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from state_store.spark.session import configure_s3
    from state_store.storage import S3Options

    [port] = free_ports()
    options = S3Options(endpoint=f"http://127.0.0.1:{port}", access_key="lakestate", secret_key="lakestate-secret",
                        region="us-east-1")
    env = {"AWS_ENDPOINT_URL": options.endpoint, "AWS_ACCESS_KEY_ID": options.access_key,
           "AWS_SECRET_ACCESS_KEY": options.secret_key, "AWS_REGION": options.region}
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    # The server's process group ends with the module, or when its start fails.
    with open(log_path, "w") as log, process_group([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                                    str(port)], stdout=log, stderr=subprocess.STDOUT) as server, \
            environ(env):
        try:
            client = boto3.client("s3", endpoint_url=options.endpoint, region_name=options.region,
                                  aws_access_key_id=options.access_key, aws_secret_access_key=options.secret_key)

            def created() -> bool:
                assert server.poll() is None, f"the S3 server exited: see {log_path}"
                try:
                    client.create_bucket(Bucket=S3_BUCKET)
                    return True
                except (BotoCoreError, ClientError):  # not answering yet (botocore wraps any HTTP error)
                    return False

            # Its start (imports, mostly) waited for while its CPU time grows, on a loaded machine too.
            wait_advancing(created, lambda: (int(cpu_seconds([server.pid])), file_sizes(log_path)),
                           f"the S3 server answering (see {log_path})", stall_s=60, ceiling_s=300, every_s=0.2)
            configure_s3(spark, options)
            yield options
        finally:
            _forget_s3_filesystem(spark)


def _forget_s3_filesystem(spark) -> None:
    """Hadoop keeps one S3A file system per bucket, with the endpoint it was opened with: closed (so out of the
    cache) when a module's server stops, the next module's server is reached by a new one, not the dead one."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI(f"s3a://{S3_BUCKET}/"),
                                            spark.sparkContext._jsc.hadoopConfiguration()).close()


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """scripts/spark-cluster.sh's master and two workers of one core each, in a folder of this module's own:
    ``{"url", "env", "dir"}``. start is idempotent; stop leaves no process of it and says so idempotently."""
    directory = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "LAKESTATE_CLUSTER_DIR": str(directory), "LAKESTATE_CLUSTER_PORT": str(free_port_run(4))}
    started = script("spark-cluster", "start", env)
    assert started.returncode == 0 and "with 2 workers of 1 core(s)" in started.stdout, started.stdout + started.stderr
    again = script("spark-cluster", "start", env)
    assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
    pids = [p.read_text().strip() for p in sorted(directory.glob("*.pid"))]
    try:
        yield {"url": script("spark-cluster", "url", env).stdout.strip(), "env": env, "dir": directory}
    finally:
        stopped = script("spark-cluster", "stop", env)
        assert stopped.returncode == 0 and "stopped" in stopped.stdout, stopped.stdout + stopped.stderr
        assert all(subprocess.run(["kill", "-0", p], capture_output=True).returncode for p in pids)
        assert script("spark-cluster", "status", env).returncode == 1
        assert script("spark-cluster", "stop", env).stdout.strip() == "[cluster] not running"
