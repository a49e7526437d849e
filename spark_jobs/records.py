"""The record frame (after converters and transforms) -> the change frame the sinks consume.

A record with a value is an upsert of that value; a record with a null value (a tombstone, or a
Debezium delete unwrapped with delete_handling none) deletes its key. The change frame has the same
columns as the Debezium decoder (connectors/debezium/envelope.py) produces, plus ``record_key`` and
``record_value`` (the typed structs, from which MySQL tables are created and evolved).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from connectors.changes import VERSION_SHIFT
from connectors.errors import ConfigError

ROUTE = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}$"  # a Kafka topic name, not starting with '.'
RESERVED_ROUTE = r"^(?i)cdcflow[_-]"  # cdcflow's own tables (cdcflow_tombstones, …) and index


def bad_route_reason(topic: Column) -> Column:
    """Why a (transformed) topic cannot name a table or an index, or null. Transforms such as
    ExtractTopic take the topic from record data; it must not reach cdcflow's own tables, a hidden
    index, or anything a topic name could not be."""
    shown = F.substring(topic, 1, 80)
    return (F.when(topic.isNull(), F.lit("the routed topic is null"))
            .when(~topic.rlike(ROUTE), F.concat(
                F.lit("the routed topic '"), shown, F.lit("' cannot name a table or an index: expected 1-249 of "
                                                          "A-Z a-z 0-9 . _ -, not starting with '.'")))
            .when(topic.rlike(RESERVED_ROUTE), F.concat(
                F.lit("the routed topic '"), shown, F.lit("' is reserved: names starting with cdcflow_ or cdcflow- "
                                                          "are cdcflow's own tables and indices"))))


def records_to_changes(rec: DataFrame, versioning: str) -> DataFrame:
    value_type, key_type = rec.schema["value"].dataType, rec.schema["key"].dataType
    if not isinstance(value_type, T.StructType):
        raise ConfigError(f"after the transforms the value is {value_type.simpleString()}; sinks need a struct "
                          "(a JSON object): use the json or json_schema converter, or add a HoistField")
    tombstone = F.col("value").isNull()
    key_image = (F.from_json(F.to_json(F.col("key")), "map<string,string>") if isinstance(key_type, T.StructType)
                 else F.lit(None).cast("map<string,string>"))
    image = F.when(tombstone, key_image).otherwise(F.from_json(F.to_json(F.col("value")), "map<string,string>"))
    if versioning == "kafka_offset":
        version = F.col("offset")
        unversioned = F.lit(False)
    else:
        # an unwrapped Debezium delete (null value) still has its source.ts_ms; a Kafka tombstone does not
        # and takes the version of the change before it (latest_per_key)
        ts = F.col("_source_ts_ms")
        version = F.when(ts.isNotNull(), ts * F.lit(VERSION_SHIFT) + F.pmod(F.col("offset"), F.lit(VERSION_SHIFT)))
        unversioned = ~tombstone & ts.isNull()
    ok = F.col("_error_stage").isNull()
    bad_route = bad_route_reason(F.col("topic"))
    stage = F.when(~ok, F.col("_error_stage")).when(unversioned | bad_route.isNotNull(), F.lit("transform"))
    message = F.when(~ok, F.col("_error_message")).when(bad_route.isNotNull(), bad_route).when(unversioned, F.lit(
        "no source.ts_ms to version the change by (versioning: source_ts_ms needs a Debezium topic and an "
        "ExtractNewRecordState transform; otherwise set versioning: kafka_offset)"))
    return rec.select(
        F.col("_raw_topic").alias("topic"), "partition", "offset", F.col("_raw_timestamp").alias("timestamp"),
        F.col("_raw_key").alias("key"), F.col("_raw_value").alias("value"), F.col("_raw_headers").alias("headers"),
        F.col("topic").alias("route"),
        F.when(tombstone, F.lit("delete")).otherwise(F.lit("upsert")).alias("change_op"),
        image.alias("image"), key_image.alias("key_image"),
        F.when(~tombstone, F.to_json(F.col("value"))).alias("image_json"),
        version.cast("bigint").alias("version"), stage.alias("error_stage"), message.alias("error_message"),
        F.col("key").alias("record_key"), F.col("value").alias("record_value"),
        F.lit(0).alias("row_index"),  # one change per record
    )
