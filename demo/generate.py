"""Write demo input: N files of click events (Parquet) and one rules file (JSON lines).

    python -m demo.generate --files 5 --events 100000 --keys 100000

Files are numbered after those already there, so running it again adds new
input for the next run to pick up.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from demo.clicks import root

PAGES = [f"/page/{i}" for i in range(20)]
WINDOW_MS = 60_000  # file n holds the events of minute n of event time (``ts``), and a few late ones
LATE_SHARE = 0.01  # of each file's events: from an earlier minute, behind the watermark (demo.sessions)


def write_events(directory: Path, files: int, events: int, keys: int, seed: int = 7) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    first = len(list(directory.glob("events-*.parquet")))
    written = []
    for n in range(first, first + files):
        rng = random.Random(seed + n)
        # Every file touches every key once when events == keys: the worst case for state reads.
        users = list(range(keys)) * (events // keys) + rng.sample(range(keys), events % keys)
        rng.shuffle(users)
        table = pa.table({
            "user_id": pa.array(users, pa.int64()),
            "page": pa.array([PAGES[rng.randrange(len(PAGES))] for _ in users], pa.string()),
            "amount": pa.array([round(rng.uniform(0.5, 50.0), 2) for _ in users], pa.float64()),
            "seq": pa.array(range(n * events, (n + 1) * events), pa.int64()),
            "ts": pa.array([(n - (n > 0 and rng.random() < LATE_SHARE)) * WINDOW_MS + rng.randrange(WINDOW_MS)
                            for _ in users], pa.int64()),
        })
        path = directory / f"events-{n:05d}.parquet"
        pq.write_table(table, path)
        written.append(path)
    return written


def write_rules(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "rules-00000.json"
    if not path.exists():
        path.write_text("\n".join(json.dumps({"page": p, "multiplier": 2.0}) for p in PAGES[:3]) + "\n")
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--events", type=int, default=100_000, help="events per file")
    parser.add_argument("--keys", type=int, default=100_000, help="distinct user ids")
    args = parser.parse_args(argv)
    inputs = root() / "input"
    files = write_events(inputs / "clicks", args.files, args.events, args.keys)
    write_rules(inputs / "rules")
    print(f"[demo] wrote {len(files)} event files ({args.events} events each, {args.keys} keys) to {inputs / 'clicks'}")


if __name__ == "__main__":
    main()
