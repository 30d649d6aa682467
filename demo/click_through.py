"""A join of two streams (README "Two inputs and joins"): per ad, each click joined with the impressions of that
ad shown to the same user in the 10 minutes of event time before it, as a Flink user writes an interval join.

    impressions.key_by("ad").interval_join(clicks.key_by("ad"))
        .between(timedelta(0), timedelta(minutes=10))
        .process(ClickThrough(), uid="click-through", output_type=CLICK_THROUGH)
        .sink_to("sinks/click_through")

Impressions ``{ad, user_id, ts}`` and clicks ``{ad, user_id, ts}`` arrive as Parquet files in two folders, each
a source with its own offsets; file n of each holds minute n of event time (``write``). A pair is emitted for
each impression and later click of the same ad and user within 10 minutes; the join keys by ad, and the function
keeps the pairs of one user. ``expected`` is the same join in pandas.
"""
from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

from state_store import Dataflow, FileSource, ProcessJoinFunction, Types, WatermarkStrategy

EVENT = Types.ROW_NAMED(["ad", "user_id", "ts"], [Types.STRING(), Types.LONG(), Types.LONG()])
CLICK_THROUGH = Types.ROW_NAMED(["ad", "user_id", "shown", "clicked"],
                                [Types.STRING(), Types.LONG(), Types.LONG(), Types.LONG()])
WITHIN = timedelta(minutes=10)
BOUND_MS = 5_000


class ClickThrough(ProcessJoinFunction):
    """An impression and a click of its ad within 10 minutes after it: a click-through if by the same user."""

    def process_element(self, impression, click, ctx):
        if impression["user_id"] == click["user_id"]:
            yield {"ad": impression["ad"], "user_id": click["user_id"], "shown": ctx.left_timestamp(),
                   "clicked": ctx.right_timestamp()}


def dataflow(impressions_dir, clicks_dir, *, job_id: str = "click-through", sink: str = "sinks/click_through",
             parallelism: int = 2):
    """The join over the files in the two folders (a ``JobSpec``: one operator of two inputs)."""
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=BOUND_MS)).with_timestamp_column(
        "ts")

    def stream(folder):
        return Dataflow.from_source(FileSource(str(folder), "parquet", EVENT, max_files_per_batch=1), job_id=job_id,
                                    watermark_strategy=strategy)

    return (stream(impressions_dir).key_by("ad")
            .interval_join(stream(clicks_dir).key_by("ad"))
            .between(timedelta(0), WITHIN)
            .process(ClickThrough(), uid="click-through", output_type=CLICK_THROUGH, parallelism=parallelism)
            .sink_to(sink))


def folders(root: Path) -> tuple[Path, Path]:
    return root / "input" / "impressions", root / "input" / "ad-clicks"


def job():
    """The demo's registry entry (``lakestate.toml``): the files ``python -m demo.click_through`` writes."""
    from demo.clicks import root

    impressions, clicks = folders(root())
    impressions.mkdir(parents=True, exist_ok=True)
    clicks.mkdir(parents=True, exist_ok=True)
    return dataflow(impressions, clicks)


def write(impressions_dir: Path, clicks_dir: Path, files: int, impressions: int, users: int, ads: int = 20,
          seed: int = 7) -> None:
    """``files`` Parquet files in each folder, numbered after those already there: file n holds minute n of event
    time, ``impressions`` impressions of random ads to random users; the clicks file n a click for one in five of
    them, 0 to 15 minutes after it (so some fall outside the join's 10 minutes)."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    impressions_dir.mkdir(parents=True, exist_ok=True)
    clicks_dir.mkdir(parents=True, exist_ok=True)
    first = len(list(impressions_dir.glob("impressions-*.parquet")))
    for n in range(first, first + files):
        rng = random.Random(seed + n)
        shown = [(f"ad{rng.randrange(ads)}", rng.randrange(users), n * 60_000 + rng.randrange(60_000))
                 for _ in range(impressions)]
        clicked = [(ad, user, ts + rng.randrange(15 * 60_000)) for ad, user, ts in shown if rng.random() < 0.2]
        for folder, name, rows in ((impressions_dir, "impressions", shown), (clicks_dir, "clicks", clicked)):
            ads_, users_, ts = zip(*rows) if rows else ((), (), ())
            pq.write_table(pa.table({"ad": pa.array(ads_, pa.string()), "user_id": pa.array(users_, pa.int64()),
                                     "ts": pa.array(ts, pa.int64())}), folder / f"{name}-{n:05d}.parquet")


def expected(impressions_dir: Path, clicks_dir: Path, watermarks: list[int]) -> list[tuple]:
    """The same join in pandas: each impression and click of one ad and user, the click 0 to 10 minutes after,
    leaving out a record late in its microbatch (its time below the watermark before it; ``watermarks``: W(m)
    after each file m)."""
    import pandas as pd
    import pyarrow.parquet as pq

    def read(folder, name):
        parts = []
        for m, path in enumerate(sorted(folder.glob(f"{name}-*.parquet"))):
            frame = pq.read_table(path).to_pandas()
            before = watermarks[m - 1] if m else None
            parts.append(frame if before is None else frame[frame["ts"] >= before])
        return pd.concat(parts)

    pairs = read(impressions_dir, "impressions").merge(read(clicks_dir, "clicks"), on=["ad", "user_id"],
                                                       suffixes=("_shown", "_clicked"))
    delay = pairs["ts_clicked"] - pairs["ts_shown"]
    pairs = pairs[(delay >= 0) & (delay <= WITHIN // timedelta(milliseconds=1))]
    return sorted(zip(pairs["ad"], pairs["user_id"].astype(int), pairs["ts_shown"].astype(int),
                      pairs["ts_clicked"].astype(int)))


def main() -> None:
    parser = argparse.ArgumentParser(description="write impressions and clicks for the demo's join")
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--impressions", type=int, default=2000)
    parser.add_argument("--users", type=int, default=200)
    args = parser.parse_args()
    from demo.clicks import root

    write(*folders(root()), args.files, args.impressions, args.users)


if __name__ == "__main__":
    main()
