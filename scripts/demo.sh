#!/usr/bin/env bash
# README command 1: set up (idempotent), then run the demo job through Airflow on the embedded default: real DAG
# runs, triggered and run by the scheduler of an `airflow standalone` (scripts/airflow-ui.sh, SQLite metadata
# database under ./airflow-home; one already running for $AIRFLOW_HOME is used, else one is started and stopped
# at the end), so the UI shows every run with its task logs. Each run submits with spark-submit to local[*] Spark
# and a warehouse under ./lakestate-data.
# The first time it writes 3 input files (later times one), runs the pipeline, rescales the job through the
# rescale DAG (2 <-> 3), writes 2 more files and runs the pipeline again, which continues at the new
# parallelism from the rescaled checkpoint. After each clicks run, the sessions pipeline (demo.sessions: event
# time, timers, a side output) runs over the same files and the demo prints the sessions each microbatch closed.
# Once, a job of two operators (demo.sessions_per_country) runs over clicks of its own and prints its result, and a
# windowed job (demo.clicks_per_minute) counts those clicks per country and minute; a job keyed by (country, user)
# (demo.busy_users) counts its busy user-minutes, a side output, per country; a join of two streams
# (demo.click_through) pairs impressions and clicks per ad; two SQL jobs of the registry count clicks per country and
# minute (a windowing TVF) and keep the top 3 pages (an updating Top-N).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh

FILES=${DEMO_FILES:-3} EVENTS=${DEMO_EVENTS:-20000} KEYS=${DEMO_KEYS:-20000}
if [ -d "$LAKESTATE_ROOT/input/clicks" ] && ls "$LAKESTATE_ROOT"/input/clicks/*.parquet >/dev/null 2>&1; then
  python -m demo.generate --files 1 --events "$EVENTS" --keys "$KEYS"
else
  python -m demo.generate --files "$FILES" --events "$EVENTS" --keys "$KEYS"
fi
source scripts/demo-common.sh
start_ui  # the scheduler the runs go through
if [ "$UI_STARTED" = 1 ]; then
  trap 'bash scripts/airflow-ui.sh stop >/dev/null' EXIT
fi

# The job with time: sessions of the same clicks, closed by event-time timers as the watermark passes.
sessions() {
  dag_run lakestate_sessions
  python - <<'PY'
from state_store.catalog.job_store import JobStore
from state_store.settings import Settings

for batch_id, c in JobStore(Settings.load().job_dir("sessions")).commit_records().items():
    print(f"[demo] sessions, microbatch {batch_id}: {c['records_out']} sessions closed, {c.get('side_out', 0)} late "
          f"clicks to the side output, {c.get('timers_fired', 0)} timers fired")
PY
}

# A job of two operators (demo.sessions_per_country, a dataflow): per user, sessions closed by event time; then per
# country, the sessions closed so far. One run takes each microbatch through both; one checkpoint pins both.
per_country() {
  python -m demo.sessions_per_country --files "$1" --events "$EVENTS" --users "$(( KEYS / 4 + 1 ))" >/dev/null
  dag_run lakestate_sessions-per-country
  python - <<'PY'
from deltalake import DeltaTable

from state_store.catalog.job_store import JobStore
from state_store.settings import Settings

settings = Settings.load()
latest = JobStore(settings.job_dir("sessions-per-country")).latest_checkpoint()
print(f"[demo] sessions-per-country: checkpoint {latest.checkpoint_id} at microbatch {latest.batch_id} pins both "
      f"operators: sessions at parallelism {latest.parallelism}, per-country at "
      f"{latest.of_operator('per-country').parallelism}")
rows = DeltaTable(str(settings.sink("sinks/sessions_per_country"))).to_pandas()
for r in rows.sort_values("_microbatch").groupby("country").tail(1).sort_values("country").itertuples():
    print(f"[demo] country {r.country}: {r.sessions} sessions closed, {r.clicks} clicks in them")
PY
}

# A window (demo.clicks_per_minute): per country, clicks per minute of event time over the same clicks.
per_minute() {
  dag_run lakestate_clicks-per-minute
  python - <<'PY'
from deltalake import DeltaTable

from state_store.settings import Settings

rows = DeltaTable(str(Settings.load().sink("sinks/clicks_per_minute"))).to_pandas()
last = rows.sort_values("_microbatch").groupby(["country", "minute"]).tail(1)
for minute, per in last.groupby("minute"):
    print(f"[demo] clicks-per-minute, minute {minute}: " + ", ".join(
        f"{r.country} {r.clicks} clicks by {r.users} users" for r in per.sort_values("country").itertuples()))
PY
}

# A composite key and a side output read further (demo.busy_users): per (country, user) and minute the clicks; the
# busy user-minutes, a side output, counted per country by a second operator of the same job.
busy_users() {
  dag_run lakestate_busy-users
  python - <<'PY'
from deltalake import DeltaTable

from state_store.settings import Settings

settings = Settings.load()
minutes = DeltaTable(str(settings.sink("sinks/user_minutes"))).to_pandas()
busy = DeltaTable(str(settings.sink("sinks/busy_per_country"))).to_pandas()
latest = busy.sort_values("_microbatch").groupby("country").tail(1).sort_values("country")
print(f"[demo] busy-users: {len(minutes)} (country, user) minutes closed; busy ones per country: " + ", ".join(
    f"{r.country} {r.busy_user_minutes}" for r in latest.itertuples()))
PY
}

# A join of two streams (demo.click_through): per ad, each impression with its user's clicks in the 10 minutes
# after it; impressions and clicks are two sources of one job, each with its own offsets.
click_through() {
  if ls "$LAKESTATE_ROOT"/input/impressions/*.parquet >/dev/null 2>&1; then n=1; else n="$FILES"; fi
  python -m demo.click_through --files "$n"
  dag_run lakestate_click-through
  python - <<'PY'
from deltalake import DeltaTable

from state_store.catalog.job_store import JobStore
from state_store.settings import Settings

settings = Settings.load()
latest = JobStore(settings.job_dir("click-through")).latest_checkpoint()
read = {name: len(offset.get("files", [])) for name, offset in latest.source_offsets.items()}
print(f"[demo] click-through: checkpoint {latest.checkpoint_id} at microbatch {latest.batch_id} pins both sources' "
      f"offsets: {read['main']} files of impressions, {read['second']} of clicks read")
rows = DeltaTable(str(settings.sink("sinks/click_through"))).to_pandas()
per_ad = rows.groupby("ad").size().sort_values(ascending=False).head(5)
print("[demo] click-throughs per ad (top 5): " + ", ".join(f"{ad} {n}" for ad, n in per_ad.items()))
PY
}

# Two SQL jobs of the registry (lakestate.toml; docs/writing/sql.md): per country, clicks per minute as a windowing
# TVF over the clicks per_country wrote, and the top 3 pages by clicks over the clicks, an updating Top-N.
sql_jobs() {
  dag_run lakestate_sql-clicks-per-minute
  dag_run lakestate_sql-top-pages
  python - <<'PY'
from deltalake import DeltaTable

from state_store.settings import Settings

settings = Settings.load()
minutes = DeltaTable(str(settings.sink("sinks/sql_clicks_per_minute"))).to_pandas()
for start, per in sorted(minutes.groupby("window_start"))[-2:]:
    print(f"[demo] SQL clicks-per-minute, minute {start // 60_000}: " + ", ".join(
        f"{r.country} {r.clicks}" for r in per.sort_values("country").itertuples()))
top = DeltaTable(str(settings.sink("sinks/sql_top_pages"))).to_pandas().sort_values("place")
print("[demo] SQL top pages: " + ", ".join(f"{r.place}. {r.page} ({r.clicks} clicks)" for r in top.itertuples()))
PY
}

dag_run lakestate_clicks
sessions
if ls "$LAKESTATE_ROOT"/input/country-clicks/*.parquet >/dev/null 2>&1; then per_country 1; else per_country "$FILES"; fi
per_minute
sql_jobs
busy_users
click_through
# A rescale in the middle: the job is held meanwhile (a pipeline run would wait), a savepoint is taken first,
# keyed state stays where it is, and the next run continues at the new parallelism.
NOW=$(python -c "from state_store.catalog.job_store import JobStore; from state_store.settings import Settings; \
print(JobStore(Settings.load().job_dir('clicks')).latest_checkpoint().parallelism)")
NEW=$(( NOW == 3 ? 2 : 3 ))
dag_run lakestate_rescale "{\"job\": \"clicks\", \"parallelism\": $NEW, \"savepoint_first\": true}"
python -m demo.generate --files 2 --events "$EVENTS" --keys "$KEYS"
dag_run lakestate_clicks
sessions
echo
lakestate checkpoints --job clicks
echo
lakestate savepoints --job clicks
echo
echo "state of user 42 at the latest checkpoint:"
lakestate state --job clicks --state events --key 42 2>/dev/null | tail -1
echo
echo "[demo] every run above is in the Airflow UI with its task logs ($AIRFLOW_HOME/logs): scripts/airflow-ui.sh"
