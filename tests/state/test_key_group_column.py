"""The key group of a record is computed in the JVM from Spark SQL's Murmur3 ``hash`` (seed 42):
stable across runs, machines and Python processes (never Python's salted ``hash()``).

The reference below re-implements Spark's Murmur3_x86_32 (hashInt, hashLong, hashUnsafeBytes)
so the test proves the column equals the documented algorithm, not just itself.
"""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from state_store.key_groups import (
    compute_key_group_range_for_operator_index,
    compute_operator_index_for_key_group,
    first_key_group_column,
    key_group_column,
    subtask_column,
)

C1, C2, MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & MASK


def _mix_k1(k1):
    return (_rotl((k1 * C1) & MASK, 15) * C2) & MASK


def _mix_h1(h1, k1):
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & MASK


def _fmix(h1, length):
    h1 ^= length
    h1 = ((h1 ^ (h1 >> 16)) * 0x85EBCA6B) & MASK
    h1 = ((h1 ^ (h1 >> 13)) * 0xC2B2AE35) & MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_hash_int(value, seed=42):
    return _fmix(_mix_h1(seed, _mix_k1(value & MASK)), 4)


def spark_hash_long(value, seed=42):
    low, high = value & MASK, (value >> 32) & MASK
    return _fmix(_mix_h1(_mix_h1(seed, _mix_k1(low)), _mix_k1(high)), 8)


def spark_hash_string(value: str, seed=42):
    data = value.encode("utf-8")
    aligned = len(data) - len(data) % 4
    h1 = seed
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for b in data[aligned:]:  # Spark's hashUnsafeBytes mixes each trailing byte as a signed int
        h1 = _mix_h1(h1, _mix_k1((b - 256 if b > 127 else b) & MASK))
    return _fmix(h1, len(data))


@pytest.mark.parametrize("ddl,values,reference", [
    ("string", ["a", "user-1", "", "ünï", "a longer key with tail"], spark_hash_string),
    ("bigint", [0, 42, -7, 2**40, -(2**63)], spark_hash_long),
    ("int", [0, 42, -7, 2**31 - 1], spark_hash_int),
])
@pytest.mark.parametrize("max_parallelism", [128, 32768])
def test_key_group_is_pmod_of_spark_murmur3_hash(spark, ddl, values, reference, max_parallelism):
    df = spark.createDataFrame([(v,) for v in values], f"k {ddl}")
    rows = df.select("k", key_group_column(F.col("k"), max_parallelism).alias("kg"),
                     subtask_column(key_group_column(F.col("k"), max_parallelism), 3, max_parallelism).alias("st")
                     ).collect()
    for k, kg, st in rows:
        assert kg == reference(k) % max_parallelism
        assert st == compute_operator_index_for_key_group(max_parallelism, 3, kg)
    firsts = spark.range(3).select(first_key_group_column(F.col("id"), 3, max_parallelism).alias("g")).collect()
    assert [r.g for r in firsts] == [compute_key_group_range_for_operator_index(max_parallelism, 3, i).start
                                     for i in range(3)]


def test_known_key_groups_do_not_change_between_releases(spark):
    df = spark.createDataFrame([("a",), ("user-1",)], "k string")
    assert [r.kg for r in df.select(key_group_column(F.col("k"), 128).alias("kg")).collect()] == [82, 86]
