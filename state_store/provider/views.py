"""The Lakestate page: a FastAPI app the Airflow API server mounts at /lakestate; every route needs a logged-in
Airflow user (Airflow does not protect plugin apps by itself).

The page is rendered here once, as an HTML fragment (``/lakestate/fragment``), and shown two ways: inside the
Airflow UI by the React view ``static/lakestate.js`` (no iframe, so its links navigate the UI's own router), and
on its own at ``/lakestate/``. Times are shown in the timezone the user picked in the UI (``?tz=``)."""
from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow.api_fastapi.core_api.security import requires_authenticated
from fastapi import Depends, FastAPI
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from state_store.provider.reader import JobOverview, human_bytes, job_overviews
from state_store.records.metadata import AirflowRun
from state_store.settings import Settings

# FastAPI's own /docs, /redoc and /openapi.json are plain routes that the app's dependencies do not reach, so
# they answered anyone: turned off, every route left is one of ours and needs a logged-in user.
app = FastAPI(title="Lakestate", dependencies=[Depends(requires_authenticated())], docs_url=None, redoc_url=None,
              openapi_url=None)
STATIC = Path(__file__).parent / "static"
OPERATIONS = ("savepoint", "rescale", "restore", "dispose", "compaction")

# Colours as variables, so the UI's dark mode (the class "dark" on <html>) and the standalone page's
# prefers-color-scheme swap one set for the other.
_LIGHT = {"fg": "#1b1f24", "muted": "#57606a", "border": "#d0d7de", "head": "#f6f8fa", "bar": "#0969da",
          "band-0": "#e8f0fb", "band-1": "#f6f8fa", "problem": "#b42318", "link": "#0969da", "page": "#ffffff"}
_DARK = {"fg": "#e6edf3", "muted": "#9da7b3", "border": "#3d444d", "head": "#1c2128", "bar": "#4493f8",
         "band-0": "#15263d", "band-1": "#1c2128", "problem": "#ff7b72", "link": "#58a6ff", "page": "#0d1117"}


def _palette(colours: dict) -> str:
    return ";".join(f"--ls-{name}:{value}" for name, value in colours.items())


_STYLE = (
    f".lakestate{{{_palette(_LIGHT)}}}.dark .lakestate{{{_palette(_DARK)}}}"
    f"@media (prefers-color-scheme:dark){{html:not(.light) .lakestate.standalone{{{_palette(_DARK)}}}}}"
    ".lakestate{color:var(--ls-fg);font:14px/1.45 system-ui,sans-serif}"
    ".lakestate.standalone{background:var(--ls-page);padding:1.5rem;min-height:100vh;box-sizing:border-box}"
    ".lakestate h1{font-size:1.5rem;font-weight:600;margin:0 0 1rem}"
    ".lakestate h2{font-size:1.25rem;font-weight:600;margin:0 0 .25rem}"
    ".lakestate h3{font-size:1rem;font-weight:600;margin:1.25rem 0 .25rem}"
    ".lakestate section{margin-bottom:2.5rem}.lakestate p{margin:.25rem 0}"
    ".lakestate table{border-collapse:collapse;margin:.25rem 0;font-size:13px;font-variant-numeric:tabular-nums}"
    ".lakestate td,.lakestate th{border:1px solid var(--ls-border);padding:.2rem .45rem;text-align:left;color:inherit}"
    ".lakestate th{background:var(--ls-head);font-weight:600;vertical-align:bottom}"
    ".lakestate td.num,.lakestate th.num{text-align:right}.lakestate td.num{white-space:nowrap}"
    ".lakestate .when,.lakestate .run,.lakestate .nowrap{white-space:nowrap}"
    ".lakestate .meta,.lakestate .note{color:var(--ls-muted)}"
    ".lakestate .note{font-size:12px;max-width:60rem}"
    ".lakestate a{color:var(--ls-link);text-decoration:underline}"
    ".lakestate .problem{color:var(--ls-problem)}"
    ".lakestate .path{font-family:ui-monospace,monospace;font-size:12px;white-space:nowrap}"
    ".lakestate button.copy{font-size:11px;margin-left:.4rem;padding:0 .4rem;border:1px solid var(--ls-border);"
    "border-radius:4px;background:var(--ls-head);color:var(--ls-fg);cursor:pointer}"
    ".lakestate .tag{padding:0 .4rem;border-radius:8px;font-size:12px;border:1px solid var(--ls-border)}"
    ".lakestate svg{display:block}.lakestate svg text{fill:var(--ls-muted);font-size:11px}"
    ".lakestate svg .bar{fill:var(--ls-bar)}.lakestate svg .band-0{fill:var(--ls-band-0)}"
    ".lakestate svg .band-1{fill:var(--ls-band-1)}.lakestate svg .axis{stroke:var(--ls-muted)}")


class Html(str):
    """Markup that ``_table`` puts in a cell as it is (everything else is escaped)."""


def count(n) -> str:
    """``20000`` -> ``"20,000"``."""
    return "-" if n is None else f"{n:,}"


def zone(name: str | None):
    """The timezone named (IANA, as the UI stores it), UTC for none or one unknown here."""
    try:
        return ZoneInfo(name) if name else timezone.utc
    except (ZoneInfoNotFoundError, ValueError):
        return timezone.utc


def zone_name(tz) -> str:
    return getattr(tz, "key", "UTC")


def _when(ms, tz) -> Html:
    if not ms:
        return Html("-")
    return Html(f"<span class='when'>{datetime.fromtimestamp(ms / 1000, tz).strftime('%Y-%m-%d %H:%M:%S')}</span>")


def _link(href: str, text: str, title: str | None = None) -> Html:
    """A link the React view hands to the UI's router (``data-nav``); the standalone page follows it."""
    tip = f" title='{html.escape(title)}'" if title else ""
    return Html(f"<a href='{html.escape(href)}' data-nav{tip}>{html.escape(text)}</a>")


def _dag_link(dag_id: str) -> Html:
    return _link(f"/dags/{quote(dag_id, safe='')}", f"DAG {dag_id}")


def _run_link(run: AirflowRun | None, tz) -> Html:
    """The run's kind and time (its id's UTC time in the picked timezone ``tz``), the run id in the tooltip."""
    if run is None:
        return Html("-")
    kind, _, stamp = run.run_id.partition("__")  # manual__2026-11-24T13:05:12.123+00:00 -> manual 2026-11-24 13:05
    try:
        when = datetime.fromisoformat(stamp)
        short = f"{kind} {when.replace(tzinfo=when.tzinfo or timezone.utc).astimezone(tz):%Y-%m-%d %H:%M}"
    except ValueError:  # a run id of one's own (the API's dag_run_id), not Airflow's kind__time
        short = run.run_id
    href = f"/dags/{quote(run.dag_id, safe='')}/runs/{quote(run.run_id, safe='')}"
    return Html(f"<span class='run'>{_link(href, short, f'{run.dag_id} / {run.run_id}')}</span>")


def _path(path: str) -> Html:
    """The path's last two parts (for a savepoint: its job's folder and its own), the whole of it in the tooltip
    and on the copy button."""
    parts = path.rstrip("/").split("/")
    short = "…/" + "/".join(parts[-2:]) if len(parts) > 3 else path
    full = html.escape(path)
    return Html(f"<span class='nowrap'><span class='path' title='{full}'>{html.escape(short)}</span>"
                f"<button type='button' class='copy' data-copy='{full}' title='copy {full}'>copy</button></span>")


def _table(header: list[str], rows: list[list], numeric: set[int] = frozenset(), cls: str = "") -> str:
    """A table; the columns ``numeric`` names are right-aligned and do not wrap."""
    def cell(tag: str, i: int, value) -> str:
        text = value if isinstance(value, Html) else html.escape(str(value))
        return f"<{tag} class='num'>{text}</{tag}>" if i in numeric else f"<{tag}>{text}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table class='{cls}'><tr>{head}</tr>{body}</table>"


def key_group_chart(job: JobOverview, width: int = 760, height: int = 150) -> str:
    """Keyed state bytes per key group as an SVG bar chart on a bytes axis, over bands that show which key
    groups each subtask owns (people look, they do not read 128 numbers)."""
    sizes = job.key_group_bytes
    if not sizes:
        return "<p class='meta'>no keyed state yet</p>"
    left, top, bottom = 72, 20, 36
    bar, peak = (width - left - 8) / len(sizes), max(sizes) or 1
    base = top + height

    def y(value: float) -> float:
        return base - height * value / peak

    parts, ticks = [], {0, len(sizes) - 1}
    for i, (start, end, total) in enumerate(job.subtask_bytes()):
        x0, w = left + start * bar, (end - start + 1) * bar
        ticks.add(start)
        parts.append(f"<g class='band' data-subtask='{i}' data-key-groups='{start}-{end}'>"
                     f"<rect class='band-{i % 2}' x='{x0:.2f}' y='{top}' width='{w:.2f}' height='{height}'>"
                     f"<title>subtask {i}: key groups {start}–{end}, {human_bytes(total)}</title></rect>"
                     f"<text x='{x0 + w / 2:.2f}' y='{top - 6}' text-anchor='middle'>subtask {i}</text></g>")
    parts += [f"<rect class='bar' x='{left + i * bar:.2f}' y='{y(s):.2f}' width='{max(bar - 0.5, 0.5):.2f}' "
              f"height='{base - y(s):.2f}'><title>key group {i}: {human_bytes(s)}</title></rect>"
              for i, s in enumerate(sizes)]
    parts.append(f"<line class='axis' x1='{left}' y1='{top}' x2='{left}' y2='{base}'/>"
                 f"<line class='axis' x1='{left}' y1='{base}' x2='{width - 8}' y2='{base}'/>")
    parts += [f"<line class='axis' x1='{left - 4}' y1='{y(v):.2f}' x2='{left}' y2='{y(v):.2f}'/>"
              f"<text class='y-tick' x='{left - 7}' y='{y(v) + 4:.2f}' text-anchor='end'>{human_bytes(v)}</text>"
              for v in (0, peak // 2, peak)]
    if len(ticks) > 18:  # too many subtasks to label each band's start
        ticks = {0, len(sizes) // 2, len(sizes) - 1}
    parts += [f"<text class='x-tick' x='{left + (g + 0.5) * bar:.2f}' y='{base + 14}' text-anchor='middle'>{g}"
              f"</text>" for g in sorted(ticks)]
    parts.append(f"<text x='{left + (width - left) / 2:.0f}' y='{base + 30}' text-anchor='middle'>key group "
                 f"(bands: the key groups each subtask owns)</text><text transform='rotate(-90)' "
                 f"x='{-(top + height / 2):.0f}' y='12' text-anchor='middle'>keyed bytes</text>")
    return (f"<svg id='key-groups-{html.escape(job.job_id)}' class='key-group-chart' width='{width}' "
            f"height='{base + bottom}' role='img' aria-label='keyed state bytes per key group, by subtask'>"
            f"{''.join(parts)}</svg>")


def subtask_table(job: JobOverview) -> str:
    """Keyed bytes per subtask against an even share: a skewed subtask stands out."""
    subtasks = job.subtask_bytes()
    total = sum(t for _, _, t in subtasks)
    even = total / len(subtasks) if subtasks and total else None
    rows = [[i, f"{start}–{end}", human_bytes(size), f"{size / total:.0%}" if total else "-",
             f"×{size / even:.2f}" if even else "-"] for i, (start, end, size) in enumerate(subtasks)]
    return _table(["subtask", "key groups", "keyed bytes", "share", "vs even share"], rows, {0, 2, 3, 4},
                  "subtasks")


def _paused(dag_id: str, dags: dict) -> bool:
    return bool(dags.get(dag_id, (False,))[0])


def _header(job: JobOverview, dags: dict) -> str:
    latest = job.latest
    paused = " <span class='tag'>paused</span>" if _paused(job.dag_id, dags) else ""
    operations = " · ".join(_link(f"/dags/lakestate_{op}", op, f"DAG lakestate_{op}: Trigger it on its page")
                            + (" <span class='tag'>paused</span>" if _paused(f"lakestate_{op}", dags) else "")
                            for op in OPERATIONS)
    return (f"<h2>{html.escape(job.job_id)}</h2>"
            f"<p class='meta'>{html.escape(job.entrypoint)} · parallelism {job.parallelism} · max parallelism "
            f"{job.max_parallelism} · backend {html.escape(job.backend)} · latest checkpoint "
            f"{latest.checkpoint_id if latest else '-'} · {_dag_link(job.dag_id)}{paused}</p>"
            f"<p class='meta'>Operations (each DAG's Trigger form asks for the job): {operations}</p>"
            + (f"<details class='sql'><summary>Its SQL</summary><pre>{html.escape(job.sql.strip())}</pre></details>"
               if job.sql else "")
            + _paused_note(job, dags))


def _paused_note(job: JobOverview, dags: dict) -> str:
    """Which of the DAGs a job needs day to day are paused (Airflow creates DAGs paused unless told otherwise):
    a run triggered of a paused DAG waits, without a word, until it is unpaused. The compaction's own line
    says it of the compaction."""
    paused = [d for d in (job.dag_id, "lakestate_savepoint", "lakestate_rescale") if _paused(d, dags)]
    if not paused:
        return ""
    links = ", ".join(_dag_link(d) for d in paused)
    return (f"<p class='meta paused'>Paused: {links}. A run triggered of a paused DAG waits until it is unpaused: "
            f"unpause {'it' if len(paused) == 1 else 'them'} with the toggle on the DAG's page.</p>")


def _rescale(job: JobOverview, task_seconds: dict) -> str:
    """What the rescale form needs to know and does not say (its params stay the same across runs, so a run
    makes no new version of the DAG): the parallelism the job runs at and its max, and what "Savepoint first"
    adds: the duration of the last savepoint task (a Spark start and the copy), not the savepoint's own time."""
    if job.latest is None:
        return ""
    said = (f"Rescale ({_dag_link('lakestate_rescale')}): the job runs at parallelism {job.parallelism}, max "
            f"{job.max_parallelism} (its key groups): a new parallelism is 1 to {job.max_parallelism}.")
    timed = [(s, task_seconds[key]) for s in job.savepoints if s.airflow_run is not None
             and (key := (s.airflow_run.dag_id, s.airflow_run.run_id)) in task_seconds]
    if timed:
        savepoint, seconds = max(timed, key=lambda t: t[0].created_ms)
        said += (f" Savepoint first adds about {seconds:.0f} s: the last savepoint task took {seconds:.0f} s for "
                 f"{human_bytes(savepoint.size_bytes)} ({html.escape(savepoint.name)}).")
    elif job.savepoints:
        said += (" Savepoint first adds a savepoint task's time: no savepoint of the job was taken by a task "
                 "Airflow still knows the duration of.")
    else:
        said += " Savepoint first adds a savepoint task's time: the job has no savepoint yet."
    return f"<p class='meta rescale'>{said}</p>"


def _checkpoints(job: JobOverview, tz) -> str:
    if not job.checkpoints:
        return (f"<h3>Checkpoints</h3><p class='meta checkpoints-none'>no checkpoint yet: trigger "
                f"{_dag_link(job.dag_id)} (its run takes the job's first checkpoint), or run "
                f"<code>lakestate run --job {html.escape(job.job_id)}</code></p>")
    rows = []
    for c in reversed(job.checkpoints):
        versions = " · ".join(f"{name} v{t.version}" for name, t in sorted(c.state.items())
                              if t is not None and t.version is not None)
        origin = html.escape(job.origin(c)[1] or "-")
        rows.append([c.checkpoint_id, c.batch_id, _when(c.completed_ms, tz), c.parallelism, c.backend,
                     count(c.total_entries), Html(f"<span class='nowrap'>{origin}</span>"),
                     _run_link(job.airflow_run(c), tz), Html(f"<span class='nowrap'>{versions or '-'}</span>"),
                     human_bytes(c.size_bytes), count(c.num_files)])
    return (_table(["checkpoint", "microbatch", f"completed ({zone_name(tz)})", "parallelism", "backend",
                    "live entries", "origin", "Airflow run", "table versions", "their bytes", "their files"],
                   rows, {0, 1, 3, 5, 9, 10}, "checkpoints")
            + "<p class='note'>Live entries: what the checkpoint holds at its microbatch. Their bytes and files: "
              "the totals of the Delta table versions it pins, which with the delta backend also keep rows "
              "superseded since the last compaction, so checkpoints pinning one version show one size.</p>")


def _savepoints(job: JobOverview, tz) -> str:
    if not job.savepoints:
        return ("<h3>Savepoints</h3><p class='meta'>no savepoints: trigger "
                f"{_dag_link('lakestate_savepoint')}</p>")
    rows = [[Html(html.escape(s.name).replace("__", "__<wbr>")), s.checkpoint_id, s.batch_id,
             _when(s.created_ms, tz), s.parallelism, s.backend, count(s.total_entries),
             human_bytes(s.size_bytes), _run_link(s.airflow_run, tz), _path(s.path)]
            for s in reversed(job.savepoints)]
    return "<h3>Savepoints</h3>" + _table(
        ["savepoint", "checkpoint", "microbatch", f"created ({zone_name(tz)})", "parallelism", "taken from",
         "entries", "bytes", "Airflow run", "path"], rows, {1, 2, 4, 6, 7}, "savepoints")


def _compaction_result(report: dict) -> str:
    if report.get("nothing_to_do") or report.get("waiting"):
        return "nothing to do" + (f": {report['waiting']}" if report.get("waiting") else "")
    if report.get("new_checkpoint") is not None:
        return f"checkpoint {report['checkpoint']} → {report['new_checkpoint']}"
    return f"checkpoint {report.get('checkpoint', '-')}: old files deleted"


def _compactions(job: JobOverview, tz, dags: dict) -> str:
    c, out = job.compaction, "<h3>Last compaction that did work</h3>"
    if c:
        out += _table(["started", "result", "rows scanned", "expired removed", "superseded removed", "files",
                       "bytes reclaimed", "seconds"],
                      [[_when(c.get("started_ms"), tz), _compaction_result(c), count(c.get("rows_scanned")),
                        count(c.get("expired_removed")), count(c.get("superseded_removed")),
                        f"{count(c.get('files_before'))} → {count(c.get('files_after'))}",
                        human_bytes(c.get("bytes_reclaimed")), c.get("seconds", "-")]], {2, 3, 4, 5, 6, 7},
                      "last-compaction")
    else:
        paused, schedule = dags.get("lakestate_compaction", (None, None))
        scheduled = schedule and not schedule.startswith("Never")  # "Never, external triggers only": "none"
        when = ("it is paused: unpause or trigger it" if paused else f"it runs {schedule.lower()}" if scheduled
                else "trigger it")
        out += f"<p class='meta compaction-none'>never compacted: {_dag_link('lakestate_compaction')}: {when}</p>"
    if job.compactions:
        out += "<h3>Compactions, newest first</h3>" + _table(
            ["started", "result", "rows scanned", "bytes reclaimed", "seconds"],
            [[_when(r.get("started_ms"), tz), _compaction_result(r), count(r.get("rows_scanned")),
              human_bytes(r.get("bytes_reclaimed")), r.get("seconds", "-")] for r in job.compactions],
            {2, 3, 4}, "compactions")
    return out


def _graph(job: JobOverview) -> str:
    """Where the job's records flow: its sources, operators, sink and side outputs, an edge a row."""
    if not job.edges:
        return ""
    return "<h3>Graph: where records flow</h3>" + _table(["from", "into"], [[_paths_shortened(t) for t in e]
                                                                             for e in job.edges], set(), "graph")


# A path of the machine or a bucket's in an edge's text: it starts the text or follows a space or "(" (a sink's
# "sinks/x" is the warehouse's, relative, and stays whole)
_ABSOLUTE = re.compile(r"(?<![^\s(])((?:s3a?://|/)[^\s()]+)")


def _paths_shortened(text: str) -> Html:
    """An edge's text with each absolute path in it shortened as a savepoint's is (``_path``: its last two parts,
    the whole on hover and on the copy button); the warehouse's relative sink paths stay as they are."""
    if text.startswith("Kafka "):  # "topics /pattern/" is a topic pattern, not a path
        return Html(html.escape(text))
    parts = _ABSOLUTE.split(text)  # odd items are the paths
    return Html("".join(_path(p) if i % 2 else html.escape(p) for i, p in enumerate(parts)))


def _operators(job: JobOverview) -> str:
    """A dataflow's operators at the latest checkpoint, with each window operator's open windows (a job of one
    operator shows none, unless it is a window operator)."""
    if not job.operators:
        return ""
    rows = [[o["uid"], o["parallelism"], o["max_parallelism"], count(o["entries"]),
             count(o["open_windows"]), human_bytes(o["bytes"]),
             count(o["files"])] for o in job.operators]
    return (f"<h3>Operators at the latest checkpoint ({job.latest.checkpoint_id}), in the order records flow</h3>"
            + _table(["operator uid", "parallelism", "max parallelism", "live entries", "open windows",
                      "bytes of its table versions", "files"], rows, {1, 2, 3, 4, 5, 6}, "operators"))


def _state(job: JobOverview) -> str:
    latest = job.latest
    entries = {n: c for part in latest.parts for n, c in part.entries.items()}
    names = sorted(set(entries) | set(job.state_bytes))
    rows = [[n, count(entries.get(n, 0)), human_bytes(job.state_bytes.get(n, [0, 0])[0]),
             count(job.state_bytes.get(n, [0, 0])[1])] for n in names]
    return (_operators(job) + f"<h3>State at the latest checkpoint ({latest.checkpoint_id})</h3>" + _budget(job)
            + _table(["state", "live entries", "bytes in its table version", "files"], rows, {1, 2, 3}, "states")
            + f"<h3>Keyed state bytes per key group and subtask{_of_first(job)}</h3>" + key_group_chart(job)
            + subtask_table(job))


def _budget(job: JobOverview) -> str:
    """The budgets of the job's registry entry beside the latest checkpoint's state size (none set: nothing)."""
    if not job.budget:
        return ""
    said = []
    limit, size = job.budget["max_state_bytes"], job.latest.size_bytes
    if limit:
        over = " <strong>over budget</strong>" if size > limit else ""
        said.append(f"State {human_bytes(size)} of its budget of {human_bytes(limit)} (max_state_bytes){over}.")
    if job.budget["max_late_records"]:
        said.append(f"Late records a run may drop: at most {job.budget['max_late_records']} (max_late_records).")
    action = "fails" if job.budget["on_over_budget"] == "fail" else "warns"
    return f'<p class="lakestate-budget">{" ".join(said)} A run over budget {action}.</p>'


def _of_first(job: JobOverview) -> str:
    return f" (operator {html.escape(job.operators[0]['uid'])})" if job.operators else ""


def job_section(job: JobOverview, tz=timezone.utc, dags: dict | None = None,
                task_seconds: dict | None = None) -> str:
    """A job's section; ``dags``: ``dag_states``, ``task_seconds``: ``savepoint_task_seconds`` (both empty
    without Airflow's database)."""
    dags = dags or {}
    parts = [f"<section id='job-{html.escape(job.job_id)}'>", _header(job, dags), _rescale(job, task_seconds or {}),
             _graph(job)]
    parts += [f"<p class='problem'>{html.escape(p)}</p>" for p in job.problems]
    parts += [_checkpoints(job, tz), _savepoints(job, tz), _compactions(job, tz, dags)]
    if job.latest is not None:
        parts.append(_state(job))
    return "".join(parts) + "</section>"


def dag_states(dag_ids: list[str]) -> dict[str, tuple[bool, str | None]]:
    """``dag id -> (paused, schedule description)`` from Airflow's metadata database, for the DAGs it knows
    (the page then never says "runs daily" of a paused DAG); empty when the database cannot be read."""
    try:
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(select(DagModel.dag_id, DagModel.is_paused, DagModel.timetable_description)
                                   .where(DagModel.dag_id.in_(dag_ids))).all()
    except Exception:  # noqa: BLE001 - the page shows without it
        return {}
    return {dag_id: (bool(paused), description) for dag_id, paused, description in rows}


def savepoint_task_seconds(runs: list[AirflowRun]) -> dict[tuple[str, str], float]:
    """``(dag id, run id) -> seconds`` the savepoint task of each savepoint DAG run in ``runs`` took, from
    Airflow's metadata database: what a person waits for, a Spark start included (the savepoint's own
    ``seconds`` is only the copy); empty when the database cannot be read."""
    keys = {(r.dag_id, r.run_id) for r in runs if r.dag_id == "lakestate_savepoint"}
    if not keys:
        return {}
    try:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(select(TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.duration)
                                   .where(TaskInstance.dag_id == "lakestate_savepoint",
                                          TaskInstance.task_id == "savepoint",
                                          TaskInstance.state == "success",
                                          TaskInstance.run_id.in_([run for _, run in keys]))).all()
    except Exception:  # noqa: BLE001 - the page shows without it
        return {}
    return {(dag_id, run_id): float(seconds) for dag_id, run_id, seconds in rows if seconds is not None}


def fragment(tz_name: str | None = None, standalone: bool = False) -> str:
    """The page's body: what the React view shows inside the UI and the standalone page wraps."""
    tz = zone(tz_name)
    jobs, problems = job_overviews(Settings.load())
    dags = dag_states([j.dag_id for j in jobs] + [f"lakestate_{op}" for op in OPERATIONS])
    seconds = savepoint_task_seconds([s.airflow_run for j in jobs for s in j.savepoints if s.airflow_run])
    body = ("".join(job_section(j, tz, dags, seconds) for j in jobs)
            or "<p>No jobs registered yet: run a pipeline DAG.</p>")
    named = "".join(f"<p class='problem'>{html.escape(p)}</p>" for p in problems)
    cls = "lakestate standalone" if standalone else "lakestate"
    return (f"<div class='{cls}' data-timezone='{html.escape(zone_name(tz))}'><style>{_STYLE}</style>"
            f"<h1>Lakestate</h1>{named}{body}</div>")


@app.get("/", response_class=HTMLResponse)
def page(tz: str | None = None) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Lakestate</title>"
            "<style>body{margin:0}</style></head><body>" + fragment(tz, standalone=True)
            + "<script type='module'>import {onClick} from '/lakestate/static/lakestate.js';"
              "document.addEventListener('click', onClick);</script></body></html>")


@app.get("/fragment", response_class=HTMLResponse)
def page_fragment(tz: str | None = None) -> str:
    return fragment(tz)


@app.get("/static/lakestate.js")
def react_view() -> FileResponse:
    """The React view the UI imports (``LakestatePlugin.react_apps``): a hand-written ES module, no build."""
    return FileResponse(STATIC / "lakestate.js", media_type="text/javascript")


@app.get("/api/jobs")
def jobs_json() -> JSONResponse:
    return JSONResponse([{"job": j.job_id, "parallelism": j.parallelism, "max_parallelism": j.max_parallelism,
                          "backend": j.backend, "latest_checkpoint": j.latest.checkpoint_id if j.latest else None,
                          "checkpoints": [c.checkpoint_id for c in j.checkpoints], "problems": j.problems,
                          "savepoints": [{"name": s.name, "path": s.path, "checkpoint": s.checkpoint_id}
                                         for s in j.savepoints],
                          "state_bytes": j.state_bytes, "key_group_bytes": j.key_group_bytes,
                          "subtasks": [{"key_groups": [start, end], "keyed_bytes": size}
                                       for start, end, size in j.subtask_bytes()],
                          "compaction": j.compaction, "compactions": j.compactions, "operators": j.operators,
                          "budget": j.budget,
                          "graph": [{"from": a, "into": b} for a, b in j.edges]}
                         for j in job_overviews(Settings.load())[0]])
