"""A custom Python transform used by the tests (named by dotted path in a pipeline)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def add_ten(df: DataFrame, field: str) -> DataFrame:
    return df.withColumn("value", F.col("value").withField(field, F.col("value")[field] + 10))
