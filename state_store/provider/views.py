"""The Lakestate page: a FastAPI app the Airflow API server mounts at /lakestate; every route needs a logged-in
Airflow user (Airflow does not protect plugin apps by itself)."""
from __future__ import annotations

import html
import time

from airflow.api_fastapi.core_api.security import requires_authenticated
from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from state_store.provider.reader import JobOverview, job_overviews
from state_store.settings import Settings

# FastAPI's own /docs, /redoc and /openapi.json are plain routes that the app's dependencies do not reach, so
# they answered anyone: turned off, every route left is one of ours and needs a logged-in user.
app = FastAPI(title="Lakestate", dependencies=[Depends(requires_authenticated())], docs_url=None, redoc_url=None,
              openapi_url=None)

_STYLE = """body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1b1f24}table{border-collapse:collapse;margin:.5rem 0}
td,th{border:1px solid #d0d7de;padding:.2rem .6rem;text-align:right}th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
.problem{color:#b42318}section{margin-bottom:2rem}h2{margin-bottom:.2rem}.meta{color:#57606a}"""


def _when(ms) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) if ms else "-"


def _origin(restored_from) -> str:
    if restored_from is None:
        return "-"
    return restored_from.label


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def key_group_chart(job: JobOverview, width: int = 640, height: int = 120) -> str:
    """Bytes of keyed state per key group as an SVG bar chart (people look, they do not read 128 numbers)."""
    sizes = job.key_group_bytes
    if not sizes:
        return "<p class='meta'>no keyed state yet</p>"
    top, bar = max(sizes) or 1, width / len(sizes)
    bars = "".join(
        f"<rect x='{i * bar:.2f}' y='{height - h:.2f}' width='{max(bar - 0.5, 0.5):.2f}' height='{h:.2f}' fill='#0969da'>"
        f"<title>key group {i}: {s} bytes</title></rect>"
        for i, s in enumerate(sizes) for h in [height * s / top])
    return (f"<svg id='key-groups-{html.escape(job.job_id)}' class='key-group-chart' width='{width}' "
            f"height='{height + 16}' role='img' aria-label='keyed state bytes per key group'>{bars}"
            f"<text x='0' y='{height + 14}' font-size='11'>key group 0</text>"
            f"<text x='{width}' y='{height + 14}' font-size='11' text-anchor='end'>{len(sizes) - 1}</text></svg>")


def job_section(job: JobOverview) -> str:
    latest = job.latest
    parts = [f"<section id='job-{html.escape(job.job_id)}'><h2>{html.escape(job.job_id)}</h2>",
             f"<p class='meta'>{html.escape(job.entrypoint)} · parallelism {job.parallelism} · max parallelism "
             f"{job.max_parallelism} · backend {html.escape(job.backend)} · latest checkpoint "
             f"{latest.checkpoint_id if latest else '-'} · <a href='/dags/{html.escape(job.dag_id)}' target='_top'>"
             f"DAG {html.escape(job.dag_id)}</a></p>"]
    parts += [f"<p class='problem'>{html.escape(p)}</p>" for p in job.problems]
    parts.append(_table(["checkpoint", "microbatch", "completed (UTC)", "parallelism", "backend", "entries",
                         "bytes", "files", "restored from"],
                        [[c.checkpoint_id, c.batch_id, _when(c.completed_ms), c.parallelism, c.backend,
                          sum(c.entries.values()), c.size_bytes, c.num_files, _origin(c.restored_from)]
                         for c in reversed(job.checkpoints)]))
    parts.append("<h3>Savepoints</h3>")
    parts.append(_table(["savepoint", "checkpoint", "microbatch", "created (UTC)", "parallelism", "taken from",
                         "entries", "bytes", "path"],
                        [[s.name, s.checkpoint_id, s.batch_id, _when(s.created_ms), s.parallelism, s.backend,
                          sum(s.entries.values()), s.size_bytes, s.path] for s in reversed(job.savepoints)])
                 if job.savepoints else "<p class='meta'>no savepoints: trigger DAG lakestate_savepoint</p>")
    parts.append("<h3>Last compaction</h3>")
    c = job.compaction
    parts.append(_table(["checkpoint", "new checkpoint", "started (UTC)", "rows scanned", "expired removed",
                         "superseded removed", "files before", "files after", "bytes reclaimed", "seconds"],
                        [[c["checkpoint"], c.get("new_checkpoint", "-"), _when(c["started_ms"]), c["rows_scanned"],
                          c["expired_removed"], c["superseded_removed"], c["files_before"], c["files_after"],
                          c["bytes_reclaimed"], c["seconds"]]])
                 if c else "<p class='meta'>never compacted: DAG lakestate_compaction runs daily</p>")
    if latest is not None:
        names = sorted(set(latest.entries) | set(job.state_bytes))
        parts.append("<h3>State at the latest checkpoint</h3>")
        parts.append(_table(["state", "entries", "bytes", "files"],
                            [[n, latest.entries.get(n, 0), *job.state_bytes.get(n, [0, 0])] for n in names]))
        parts.append("<h3>Keyed state bytes per key group</h3>" + key_group_chart(job))
    return "".join(parts) + "</section>"


@app.get("/", response_class=HTMLResponse)
def page() -> str:
    jobs, problems = job_overviews(Settings.load())
    body = "".join(job_section(j) for j in jobs) or "<p>No jobs registered yet: run a pipeline DAG.</p>"
    named = "".join(f"<p class='problem'>{html.escape(p)}</p>" for p in problems)
    return f"<!doctype html><html><head><title>Lakestate</title><style>{_STYLE}</style></head><body>" \
           f"<h1>Lakestate</h1>{named}{body}</body></html>"


@app.get("/api/jobs")
def jobs_json() -> JSONResponse:
    return JSONResponse([{"job": j.job_id, "parallelism": j.parallelism, "max_parallelism": j.max_parallelism,
                          "backend": j.backend, "latest_checkpoint": j.latest.checkpoint_id if j.latest else None,
                          "checkpoints": [c.checkpoint_id for c in j.checkpoints], "problems": j.problems,
                          "savepoints": [{"name": s.name, "path": s.path, "checkpoint": s.checkpoint_id}
                                         for s in j.savepoints],
                          "state_bytes": j.state_bytes, "key_group_bytes": j.key_group_bytes,
                          "compaction": j.compaction} for j in job_overviews(Settings.load())[0]])
