"""Nexmark's generator ported (bench/nexmark/generate.py, issue 63): the same settings give the same events, in
Nexmark's proportions and id arithmetic, as Nexmark's own Java generator gives them field for field."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from bench.nexmark.generate import SplittableRandom, event_lines, main, parse_base_time

BASE = parse_base_time("2024-12-31T23:59:50Z")


def test_splittable_random_gives_javas_values():
    """java.util.SplittableRandom's first values of seeds 42 and 7, as JDK 17 prints them."""
    random = SplittableRandom(42)
    assert [random.next_int() for _ in range(3)] == [-491277234, 909395113, -1877322334]
    assert SplittableRandom(42).next_long() == -4767286540954276203
    assert [SplittableRandom(7).next_int_below(b) for b in (10, 16, 1000)] == [6, 0, 696]


def test_the_events_are_nexmarks_proportions_ids_and_times_and_the_same_for_a_seed(tmp_path):
    events = [json.loads(line) for line in event_lines(5_000, 3, 10_000, BASE)]
    assert [json.loads(line) for line in event_lines(200, 3, 10_000, BASE)] == events[:200]  # a seed, its events
    assert [json.loads(line) for line in event_lines(200, 4, 10_000, BASE)] != events[:200]
    kinds = Counter(e["event_type"] for e in events)
    assert kinds == {0: 100, 1: 300, 2: 4600}  # 1 : 3 : 46
    assert events[0]["event_type"] == 1 and events[0]["auction"]["id"] == 1001  # event id 2 first (Nexmark's)
    people = [e["person"]["id"] for e in events if e["person"]]
    assert people == list(range(1001, 1101))  # events 0 and 1 (person 1000, auction 1000) never come
    bids = [e["bid"] for e in events if e["bid"]]
    assert min(b["bidder"] for b in bids) >= 2000  # a person id + 1000: Nexmark's quirk, kept
    assert all(1000 <= b["auction"] <= 1000 + 300 + 10 for b in bids)
    # 10,000 events/s from the base time: the i-th event (its number i + 1) at (i + 1) / 10 ms
    times = [(e["person"] or e["auction"] or e["bid"])["dateTime"] for e in events]
    assert times[:11] == ["2024-12-31 23:59:50.000"] * 9 + ["2024-12-31 23:59:50.001"] * 2
    assert times[-1] == "2024-12-31 23:59:50.500"
    main([str(tmp_path / "out"), "--events", "1000", "--files", "3", "--seed", "3"])
    written = [line for p in sorted((tmp_path / "out").iterdir()) for line in p.read_text().splitlines()]
    assert [len(p.read_text().splitlines()) for p in sorted((tmp_path / "out").iterdir())] == [333, 333, 334]
    assert written == list(event_lines(1000, 3, 10_000, BASE))


@pytest.mark.e2e  # javac and a JVM
def test_the_port_equals_nexmarks_java_generator_field_for_field(tmp_path):
    """bench/nexmark/java_check.py's comparison (100,000 events there) on 20,000 events of two settings."""
    from bench.nexmark.java_check import compare, compile_generator

    compile_generator(tmp_path / "classes")
    assert compare(20_000, 1, 10_000, BASE, tmp_path / "classes") == []
    assert compare(5_000, 11, 100, 0, tmp_path / "classes") == []
