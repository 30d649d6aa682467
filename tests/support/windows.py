"""The windowed jobs and the harness that runs them, which the window, join and vectorised window tests share."""
from __future__ import annotations

import pyarrow as pa

from state_store import (
    Dataflow,
    FileSource,
    ProcessWindowFunction,
    Types,
    WatermarkStrategy,
)
from state_store.subtask.exchange import PHASE_KEYED, PHASE_RECORD, RECORD, SIDE_KEYED
from tests.support.frames import OUT, marker, run, stats

CLICK = Types.ROW_NAMED(["k", "v", "ts"], [Types.STRING(), Types.LONG(), Types.LONG()])


CLICK_ARROW = pa.struct([("k", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])


STRATEGY = WatermarkStrategy.for_bounded_out_of_orderness(0).with_timestamp_column("ts")


def sum_of(a: dict, b: dict) -> dict:
    return {**a, "v": a["v"] + b["v"]}


def windowed(tmp_path, assigner, *, build=None, strategy=STRATEGY):
    """The window operator of a dataflow keyed by ``k`` over CLICK rows (``build``: what follows ``window``,
    default a reduce summing ``v``), and the JobSpec it is in."""
    (tmp_path / "in").mkdir(exist_ok=True)
    stream = (Dataflow.from_source(FileSource(str(tmp_path / "in"), "json", CLICK), job_id="w",
                                   watermark_strategy=strategy)
              .key_by("k").window(assigner))
    spec = (build or (lambda s: s.reduce(sum_of, uid="op")))(stream).sink_to("sinks/w")
    return spec


class Harness:
    """Microbatches through a subtask, as runs: ``feed`` one run of microbatches ``(watermark, [(k, v, ts), ...])``
    (processing time: 1,000 ms a microbatch unless given as a third item); the next ``feed`` restores from what
    the last one wrote."""

    def __init__(self, spec):
        self.spec, self.batch, self.state, self.watermark = spec, 0, {}, None
        self.sides: list[tuple] = []  # (tag name, microbatch, row) of every feed

    def feed(self, *microbatches) -> list[tuple]:
        rows, plan = [], []
        for watermark, elements, *now in microbatches:
            self.batch += 1
            plan.append((self.batch, now[0] if now else self.batch * 1_000, watermark))
            rows += [{"subtask": 0, "phase": PHASE_RECORD, "batch_id": self.batch, "side": SIDE_KEYED, "key": k,
                      "key_group": 1, RECORD: {"k": k, "v": v, "ts": ts}} for k, v, ts in elements]
        result = self.run(rows, plan, record_type=CLICK_ARROW)
        self.sides += [(r["kind"].partition(":")[2], r["batch_id"], r[OUT]) for r in result
                       if r["kind"].startswith("side:")]
        self.late_dropped = sum(counters["late_dropped"] for _, _, counters in stats(result))
        return [(r["batch_id"], r[OUT]) for r in result if r["kind"] == "out"]

    def run(self, rows: list[dict], plan: list[tuple], **types) -> list[dict]:
        """One run of the spec's operator over ``rows`` (``plan``'s microbatches) after the state the last one
        left; the state it writes is kept for the next."""
        stored = [{"subtask": 0, "phase": PHASE_KEYED, "state_name": name, "key": key, "key_group": 1,
                   "namespace": ns, "user_key": user_key, "value": value, "expiry": expiry}
                  for (name, key, ns, user_key), (value, expiry) in sorted(self.state.items(), key=str)]
        result = run(self.spec.function, marker(0), *stored, *rows, output_type=self.spec.output_type,
                     microbatches=plan, restored=bool(self.state), side_outputs=self.spec.side_outputs,
                     start_watermark=self.watermark, **types)
        self.watermark = plan[-1][2]
        for r in result:
            if r["kind"] == "k":
                slot = (r["state_name"], r["key"], r["namespace"], r["user_key"])
                if r["value"] is None:
                    self.state.pop(slot, None)
                else:
                    self.state[slot] = (r["value"], r.get("expiry"))
        return result

    def open_windows(self) -> set[str]:
        """The namespaces of the window contents in state."""
        return {ns for (name, _, ns, _), _ in self.state.items() if name == "op.window-contents"}


class Session(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield {"k": key, "sum": sum(e["v"] for e in elements), "start": w.start, "end": w.end}


# -- windows in a dataflow, on real Spark and Delta ------------------------------------------------------------
S = 1000


TIMED = Types.ROW_NAMED(["k", "ts", "seq"], [Types.STRING(), Types.LONG(), Types.LONG()])


def write_window_clicks(lake) -> None:
    lake.write_events("000.json", [{"k": "a", "ts": t, "seq": 0} for t in (0, 3 * S, 12 * S)]
                      + [{"k": "b", "ts": 4 * S, "seq": 0}])  # W = 12 s - 1: [0, 10 s) fires, a 2, b 1
    lake.write_events("001.json", [{"k": "a", "ts": 8 * S, "seq": 1}, {"k": "b", "ts": 25 * S, "seq": 0}])
    lake.write_events("002.json", [{"k": "a", "ts": 1 * S, "seq": 2}, {"k": "c", "ts": 100 * S, "seq": 0}])
