"""The port checked against Nexmark's own generator (issue 63): its Java sources (``bench/nexmark/java``, as they
are in nexmark/nexmark at commit 6b3646c) compiled by the JDK's ``javac`` against Flink's jars, with its three
unseeded random sources seeded ``seed``, ``seed + 1`` and ``seed + 2`` (the only change, made to a copy as it is
compiled), run for the first N events, and every field of every event compared with ``generate.py``'s.

    python bench/nexmark/java_check.py --events 100000 --seed 1
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from bench.nexmark.generate import event_lines, parse_base_time  # noqa: E402

JAVA = Path(__file__).resolve().parent / "java"
SEEDED = {  # each unseeded random source of Nexmark's generator: its file and the seed it is given
    "com/github/nexmark/flink/generator/NexmarkGenerator.java": "",
    "com/github/nexmark/flink/generator/model/BidGenerator.java": " + 1",
    "com/github/nexmark/flink/generator/model/StringsGenerator.java": " + 2",
}


def compile_generator(classes: Path) -> None:
    """Nexmark's generator and ``GenerateEvents`` compiled into ``classes``, their random sources seeded."""
    from bench.flink import CACHE, flink_classpath

    flink_classpath()  # Flink's jars (NexmarkConfiguration's annotations, Preconditions) fetched once
    with tempfile.TemporaryDirectory() as work:
        sources = Path(work) / "src"
        shutil.copytree(JAVA, sources)
        for name, plus in SEEDED.items():
            path = sources / name
            text = path.read_text()
            assert text.count("new SplittableRandom()") == 1, name
            path.write_text(text.replace("new SplittableRandom()",
                                         f"new SplittableRandom(Long.getLong(\"nexmark.seed\"){plus})"))
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", f"{CACHE / 'lib'}/*",
                        *map(str, sorted(sources.rglob("*.java")))], check=True, capture_output=True)


def java_lines(classes: Path, events: int, seed: int, rate: int, base_time: int) -> list[str]:
    """Nexmark's Java generator's first ``events`` events as JSON lines."""
    from bench.flink import CACHE

    done = subprocess.run(["java", f"-Dnexmark.seed={seed}", "-cp", f"{classes}:{CACHE / 'lib'}/*",
                           "GenerateEvents", str(events), str(rate), str(base_time)],
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def compare(events: int, seed: int, rate: int, base_time: int, classes: Path) -> list[str]:
    """Every field of the first ``events`` events of both generators: the differences (at most 10) named."""
    expected = java_lines(classes, events, seed, rate, base_time)
    differences = []
    if len(expected) != events:
        differences.append(f"Java gave {len(expected)} events, not {events}")
    for i, (java, python) in enumerate(zip(expected, event_lines(events, seed, rate, base_time))):
        want, got = json.loads(java), json.loads(python)
        if want != got:
            kind = ("person", "auction", "bid")[want["event_type"]]
            fields = [f for f in want[kind] if (got.get(kind) or {}).get(f) != want[kind][f]] if got.get(kind) \
                else ["event_type"]
            differences.append(f"event {i} ({kind}): {fields}: Java {want}, Python {got}")
            if len(differences) == 10:
                break
    return differences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--base-time", default="2024-12-31T23:59:50Z")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        compile_generator(Path(work) / "classes")
        differences = compare(args.events, args.seed, args.rate, parse_base_time(args.base_time),
                              Path(work) / "classes")
    for line in differences:
        print(line)
    verdict = "differ" if differences else "are equal, field for field"
    print(f"the first {args.events:,d} events of Nexmark's Java generator and generate.py (seed {args.seed}) "
          f"{verdict} ({time.perf_counter() - started:.1f}s)")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
