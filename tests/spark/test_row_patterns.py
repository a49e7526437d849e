"""The per-partition path's Java datetime patterns (spark_jobs/transform/row_patterns.py) against Spark's own
``date_format`` and ``try_to_timestamp`` (the older path's), in the session's UTC: 330 timestamps (300
at random over the years 1-9999, and the edges: leap days, midnight and noon, the first and last
microsecond of a year, years before 1 and past 9999) written by each pattern, and the texts read back
by each pattern Spark parses by."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.transform import row_patterns as rp

pytestmark = pytest.mark.spark

EPOCH = dt.datetime(1970, 1, 1)
# the patterns the older path's Spark writes and reads, this path's letters each at least once
WRITTEN = ["yyyy-MM-dd'T'HH:mm:ss", "yy MMM MMMM L LLL", "EEE EEEE E", "hh a h K k", "S SS SSS SSSSSS SSSSSSSSS",
           "XXX XX X Z ZZ ZZZZZ", "y yy yyy yyyy", "M d H m s", "'it''s' yyyy ''", "dd.MM.yyyy HH:mm:ss.SSS",
           "yyyyMMdd", "kk:mm", "LLLL", "G yyyy-MM-dd", "y yy yyy yyyy G", "GG GGG", "D DD DDD", "yyyy-DDD'T'HH",
           "z zz zzz zzzz"]
# those Spark reads by (a pattern without a year reads 1970; E and u are not read by Spark)
READ = ["yyyy-MM-dd'T'HH:mm:ss", "dd.MM.yyyy HH:mm:ss.SSS", "yyyyMMdd", "yyyy-MM-dd HH:mm:ss.SSSSSS XXX",
        "dd MMMM yyyy hh:mm:ss a", "yy-MMM-dd kk:mm", "G yyyy-MM-dd", "yyyy-DDD'T'HH", "yyyy-MM-dd z",
        "yyyy-MM-dd HH:mm zzzz", "yyyy D", "yyyy-MM D"]


def _micros(at: dt.datetime) -> int:
    return (at - EPOCH) // dt.timedelta(microseconds=1)


def _timestamps() -> list[int]:
    rng = random.Random(43)
    low, high = _micros(dt.datetime(1, 1, 1)), _micros(dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
    stamps = [rng.randrange(low, high) for _ in range(300)]
    edges = [dt.datetime(2024, 2, 29), dt.datetime(2024, 2, 29, 12), dt.datetime(2023, 12, 31, 23, 59, 59, 999999),
             dt.datetime(2000, 1, 1), dt.datetime(1900, 3, 1, 0, 0, 0, 1), dt.datetime(1969, 12, 31, 23, 59, 59),
             dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(2024, 12, 31, 11, 59),
             dt.datetime(2023, 1, 1, 0, 0, 0, 500000), dt.datetime(1582, 10, 15), dt.datetime(1582, 10, 4)]
    stamps += [_micros(e) for e in edges]
    day = 86_400_000_000
    first = _micros(dt.datetime(1, 1, 1))
    stamps += [first - day, first - 366 * day, first - 45 * 365 * day + 13 * day]  # 1 BC, 2 BC, 45 BC
    last = _micros(dt.datetime(9999, 12, 31))
    stamps += [last + 2 * day, last + 400 * day + 3_600_000_000]  # the years 10000 and 10001
    stamps += [rng.randrange(_micros(dt.datetime(1960, 1, 1)), _micros(dt.datetime(2040, 1, 1))) for _ in range(13)]
    return stamps


def _spark_column(spark: Any, stamps: list[int], expression: str) -> list[Any]:
    frame = spark.createDataFrame([(i, s) for i, s in enumerate(stamps)], "i int, us bigint")
    return [r.v for r in frame.selectExpr("i", f"{expression} AS v").orderBy("i").collect()]


@pytest.mark.parametrize("pattern", WRITTEN)
def test_each_timestamp_is_written_as_sparks_date_format_writes_it(spark: Any, pattern: str) -> None:
    stamps = _timestamps()
    quoted = pattern.replace("'", "\\'")
    want = _spark_column(spark, stamps, f"date_format(timestamp_micros(us), '{quoted}')")
    got = rp.write(pa.array(stamps, pa.timestamp("us")), rp.tokens(pattern)).to_pylist()
    wrong = [(s, g, w) for s, g, w in zip(stamps, got, want, strict=True) if g != w]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("pattern", READ)
def test_the_texts_are_read_back_as_sparks_try_to_timestamp_reads_them(spark: Any, pattern: str) -> None:
    """Of the years 1-9999 (Spark fails a window on a year it cannot hold)."""
    stamps = [s for s in _timestamps() if _micros(dt.datetime(1, 1, 1)) <= s < _micros(dt.datetime(9999, 12, 30))]
    quoted = pattern.replace("'", "\\'")
    texts = rp.write(pa.array(stamps, pa.timestamp("us")), rp.tokens(pattern)).to_pylist()
    frame = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, t string")
    want = [None if r.v is None else r.v for r in frame.selectExpr(
        "i", f"unix_micros(try_to_timestamp(t, '{quoted}')) AS v").orderBy("i").collect()]
    got = rp.parse(pa.array(texts), rp.tokens(pattern)).to_pylist()
    wrong = [(t, g, w) for t, g, w in zip(texts, got, want, strict=True) if g != w]
    assert not wrong, wrong[:5]
    assert sum(v is not None for v in got) >= len(texts) // 2  # most are read (a year's two digits lose the century)
