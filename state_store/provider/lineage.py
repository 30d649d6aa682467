"""What a pipeline run reports to OpenLineage (Airflow's OpenLineage provider calls the run operator's
``get_openlineage_facets_on_complete``): its inputs (each operator's source: a folder of files, a Delta table, a
Kafka topic), its outputs (each sink and side output table) and a run facet ``lakestate`` with the job's
parallelism, the checkpoints the run took and its figures. Read from the job's catalog record, no Spark. Names
follow OpenLineage's dataset naming: ``file`` + a path, ``s3://<bucket>`` + a key, ``kafka://<server>`` + a topic."""
from __future__ import annotations

from urllib.parse import urlparse

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import RunFacet


@attr.define
class LakestateRunFacet(RunFacet):
    """A Lakestate run: its job, parallelism (each operator's, by uid), the checkpoints it took, microbatches,
    records in and out, and rows per side output."""

    job: str
    parallelism: dict
    max_parallelism: dict
    checkpoints: list
    microbatches: list
    records_in: int
    records_out: int
    side_outputs: dict

    @staticmethod
    def _get_schema() -> str:
        return "https://github.com/lakestate/lakestate/blob/main/docs/operating/airflow.md#lineage"


def location_dataset(path: str, kind=InputDataset):
    """A dataset at a folder or table ``path``: ``s3://<bucket>`` and the key for ``s3a://`` (and ``s3://``),
    else ``file`` and the path."""
    parsed = urlparse(str(path))
    if parsed.scheme in ("s3", "s3a"):
        return kind(namespace=f"s3://{parsed.netloc}", name=parsed.path.strip("/"))
    return kind(namespace="file", name=parsed.path if parsed.scheme == "file" else str(path))


def source_datasets(source: dict) -> list:
    """The datasets a catalog record's source reads: a Kafka source one per topic (a pattern: the pattern),
    named by its first bootstrap server; a folder or Delta table its path; an edge of the dataflow none."""
    kind = source.get("type")
    if kind == "kafka":
        server = source["bootstrap_servers"].split(",")[0].strip()
        return [InputDataset(namespace=f"kafka://{server}", name=topic)
                for topic in source.get("topics") or [source.get("topic_pattern")]]
    if kind in ("files", "delta"):
        return [location_dataset(source["path"])]
    return []


def run_lineage(record: dict, summary: dict, sink_path, latest=None) -> OperatorLineage:
    """The lineage of a run of the job recorded as ``record`` (its catalog record), whose summary is
    ``summary``; ``sink_path`` turns a warehouse path into where it is (``Settings.sink``). The parallelism is
    that of ``latest``, the job's latest checkpoint (a rescale changes it), else the definition's."""
    spec = record["spec"]
    operators = spec.get("operators") or [spec]
    sources = [op.get(key) for op in operators for key in ("source", "second_source", "broadcast_source")]
    sources += [s for op in operators for s in op.get("further_sources") or []]  # a union's later streams
    inputs = [d for source in sources if source for d in source_datasets(source)]
    tables = [t for t in (spec.get("sinks") or {}).values()] or [operators[-1].get("sink") or spec.get("sink")]
    tables += [t for op in operators for t in (op.get("side_outputs") or {}).values()]
    outputs = [location_dataset(str(sink_path(t)), OutputDataset) for t in dict.fromkeys(tables) if t]
    facet = LakestateRunFacet(
        job=spec.get("job_id"),
        parallelism={op.get("uid"): (latest.of_operator(op.get("uid")) or latest).parallelism if latest else
                     op.get("parallelism") for op in operators},
        max_parallelism={op.get("uid"): op.get("max_parallelism") for op in operators},
        checkpoints=list(summary.get("checkpoints") or []), microbatches=list(summary.get("microbatches") or []),
        records_in=summary.get("records_in", 0), records_out=summary.get("records_out", 0),
        side_outputs=dict(summary.get("side_outputs") or {}))
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={"lakestate": facet})
