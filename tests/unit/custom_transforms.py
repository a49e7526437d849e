"""A custom Python transform used by the tests (named by dotted path in a pipeline)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def add_ten(df: DataFrame, field: str) -> DataFrame:
    return df.withColumn("value", F.col("value").withField(field, F.col("value")[field] + 10))


def exhaust_heap(df: DataFrame) -> DataFrame:
    """A window whose work runs the Spark driver out of heap (tests/integration/spark_jobs/test_session.py):
    every row joined with one aggregate of ~10 GB of strings."""
    big = df.sparkSession.range(0, 10_000_000, 1, 1).groupBy().agg(
        F.collect_list(F.repeat(F.lit("x"), 1000)).alias("strings"))
    return df.crossJoin(big.select(F.size("strings").alias("_n"))).where(F.col("_n") > 0).drop("_n")


def drops_a_column(df: DataFrame) -> DataFrame:
    """A function that loses a column the window needs (the Spark stage names it)."""
    return df.drop("_version")


def before_the_unwrap(df: DataFrame, drop_id: int, field: str) -> DataFrame:
    """A function before ExtractNewRecordState, whose frame's value is Debezium's envelope: it drops the
    records whose ``after`` has id ``drop_id``, upper-cases ``after.<field>``, and sets ``op`` and
    ``source.table`` (which the unwrap does not read back: the connector's stay)."""
    after = F.col("value.after")
    kept = df.where(~F.coalesce(F.col("value.after.id") == drop_id, F.lit(False)))
    value = (F.col("value").withField("after", after.withField(field, F.upper(after[field])))
             .withField("op", F.lit("x")).withField("source.table", F.lit("nope")))
    return kept.withColumn("value", value)  # a null value (a tombstone) stays null
