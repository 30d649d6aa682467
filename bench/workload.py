"""Benchmark input: Parquet files of keyed events, generated with numpy and pyarrow (no Spark).

    source scripts/env.sh && python -c "from pathlib import Path; from bench.workload import *; \
        write_workload(Path('/tmp/wl'), *WORKLOADS['R'])"

Each file `part-NNNNN.parquet` holds `events` rows with columns `key` (string,
`user-<n>`), `amount` (int64) and `ts` (int64, strictly increasing over the
whole data set, files included). Keys are uniform over `keys` distinct keys;
when `events == keys`, every file touches every key exactly once, shuffled.
Calling it again on the same directory appends files after the existing ones
(numbering and `ts` continue), so a run can add one more microbatch.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# name -> (files, events per file, distinct keys)
WORKLOADS = {"R": (5, 100_000, 100_000), "L": (10, 1_000_000, 1_000_000)}

SCHEMA = pa.schema([("key", pa.string()), ("amount", pa.int64()), ("ts", pa.int64())])


def _existing(directory: Path) -> list[Path]:
    return sorted(directory.glob("part-*.parquet"))


def _next_ts(existing: list[Path]) -> int:
    """The first `ts` after every existing file's, so appended files keep `ts` increasing."""
    if not existing:
        return 0
    return max(pc.max(pq.read_table(p, columns=["ts"])["ts"]).as_py() for p in existing) + 1


def write_workload(directory: Path, files: int, events: int, keys: int, seed: int = 11,
                   first_key: int = 0) -> list[Path]:
    """Write `files` Parquet files of `events` rows over `keys` keys (`user-<first_key>` on) into `directory`;
    return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    existing = _existing(directory)
    first = len(existing)
    ts = _next_ts(existing)
    # Seeded by the file number too, so appending a file does not repeat an earlier one.
    written = []
    for n in range(first, first + files):
        rng = np.random.default_rng([seed, n])
        if events == keys:
            ids = rng.permutation(keys)          # every key exactly once, shuffled
        else:
            ids = rng.integers(0, keys, size=events)
        key = pc.binary_join_element_wise("user-", pa.array(ids + first_key).cast(pa.string()), "")
        table = pa.table({"key": key,
                          "amount": pa.array(rng.integers(1, 1_000, size=events), pa.int64()),
                          "ts": pa.array(np.arange(ts, ts + events, dtype=np.int64))}, schema=SCHEMA)
        path = directory / f"part-{n:05d}.parquet"
        pq.write_table(table, path)
        written.append(path)
        ts += events
    return written


def workload_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line with the workload options: ``--workload`` (R or L) and overrides of its
    ``--files``, ``--events`` (per file) and ``--keys``; ``workload_sizes`` reads them back."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="R")
    parser.add_argument("--files", type=int, help="override the workload's number of files")
    parser.add_argument("--events", type=int, help="override the workload's events per file")
    parser.add_argument("--keys", type=int, help="override the workload's distinct keys")
    return parser


def workload_sizes(args: argparse.Namespace) -> tuple[int, int, int]:
    """(files, events per file, keys): the workload's, with the overrides given."""
    files, events, keys = WORKLOADS[args.workload]
    return args.files or files, args.events or events, args.keys or keys
