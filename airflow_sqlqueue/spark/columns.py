"""Column expressions that turn drained rows into typed messages, with Spark built-in functions only (no UDFs).

Input: the Parquet files written by ``SqlQueueDrainOperator(output_path=...)`` (``INPUT_SCHEMA``).

* ``summary_rows(raw)``: what the summary needs, one row per message: type, endpoint, latency, date and how
  many times it was drained. Only ``id``, ``headers`` and ``received_at`` are read (Parquet column pruning: the
  bodies stay on disk) and only four headers are parsed.
* ``messages(raw)``: the full typed dataset (``MESSAGE_COLUMNS``): the NServiceBus headers as typed columns, the
  body decoded by kind, the end-to-end latency and the partition columns ``message_type`` and ``date``.

Both run on PySpark 3.5 and 4.x; ``body_json`` is a VARIANT on 4.x and the JSON text on 3.5 (no VARIANT there).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from airflow_sqlqueue.transport.wire import headers as h

#: The columns of a drained batch (see ``batch_schema`` in ``airflow_sqlqueue.operators.parquet``).
INPUT_SCHEMA = StructType([
    StructField("id", StringType()),
    StructField("seq", LongType()),
    StructField("queue", StringType()),
    StructField("headers", StringType()),
    StructField("body", BinaryType()),
    StructField("received_at", TimestampType()),
])
#: NServiceBus wire time ``yyyy-MM-dd HH:mm:ss:ffffff Z`` as a Spark datetime pattern (``X`` reads ``Z`` as UTC).
WIRE_TIME_PATTERN = "yyyy-MM-dd HH:mm:ss:SSSSSS X"
#: ``message_type`` of a message without ``NServiceBus.EnclosedMessageTypes``.
UNKNOWN_TYPE = "unknown"
#: Values of ``body_kind``.
BODY_KINDS = ("json", "text", "binary", "empty")
PARTITION_COLUMNS = ("message_type", "date")
MESSAGE_COLUMNS = (
    "message_id", "native_id", "message_type", "enclosed_message_types", "conversation_id", "correlation_id",
    "originating_endpoint", "content_type", "message_intent", "time_sent", "received_at", "latency_ms",
    "queue", "seq", "deliveries", "headers", "body_kind", "body_json", "body_text", "body_binary", "date",
)
_MICROS_PER_DAY = 86_400_000_000
#: The headers the summary reads (parsed into a struct of just these, not a map of all).
SUMMARY_HEADERS = (h.MESSAGE_ID, h.ENCLOSED_MESSAGE_TYPES, h.ORIGINATING_ENDPOINT, h.TIME_SENT)
SUMMARY_COLUMNS = ("message_type", "originating_endpoint", "latency_ms", "date", "deliveries")
#: Whether this PySpark has VARIANT and ``is_valid_utf8`` (4.0 and later).
HAS_VARIANT = hasattr(F, "try_parse_json") and hasattr(F, "is_valid_utf8")


def _header(name: str) -> Column:
    return F.col("headers")[name]


def first_message_type(enclosed: Column) -> Column:
    """The first .NET type name of ``EnclosedMessageTypes`` without its assembly part, or ``unknown``.

    ``"Sales.OrderPlaced, Sales, Version=1.0.0.0, ...;Sales.IOrderEvent, Sales, ..."`` -> ``"Sales.OrderPlaced"``.
    """
    name = F.trim(F.substring_index(F.substring_index(enclosed, ";", 1), ",", 1))
    return F.coalesce(F.nullif(name, F.lit("")), F.lit(UNKNOWN_TYPE))


def wire_time(text: Column) -> Column:
    """An NServiceBus timestamp text as a timestamp (NULL when absent or malformed)."""
    return F.try_to_timestamp(text, F.lit(WIRE_TIME_PATTERN))


def utc_date(ts: Column) -> Column:
    """The UTC calendar date of a timestamp, whatever the session time zone."""
    return F.date_from_unix_date(F.floor(F.unix_micros(ts) / _MICROS_PER_DAY).cast("int"))


def _latency_ms() -> Column:
    return (F.unix_micros("received_at") - F.unix_micros("time_sent")) / 1000.0


def summary_rows(raw: DataFrame) -> DataFrame:
    """Drained rows to one row per message with ``SUMMARY_COLUMNS`` (duplicates counted in ``deliveries``).

    Duplicates are the same message drained twice (a batch stored again after a crash): the same Id and the same
    headers. They are grouped by ``message_id`` with the type, endpoint and time sent (a hash aggregation on
    narrow rows, no sort, no window over whole rows) and the first ``received_at`` counts, as in ``messages``.
    Two rows sharing a MessageId but differing in one of those three headers count as two messages here.
    """
    schema = StructType([StructField(name, StringType()) for name in SUMMARY_HEADERS])
    parsed = raw.select("id", "received_at", F.from_json("headers", schema).alias("h"))
    field = F.col("h").getField
    rows = parsed.select(
        F.coalesce(field(h.MESSAGE_ID), F.col("id")).alias("message_id"),
        first_message_type(field(h.ENCLOSED_MESSAGE_TYPES)).alias("message_type"),
        field(h.ORIGINATING_ENDPOINT).alias("originating_endpoint"),
        wire_time(field(h.TIME_SENT)).alias("time_sent"),
        F.col("received_at"))
    first = (rows.groupBy("message_id", "message_type", "originating_endpoint", "time_sent")
             .agg(F.min("received_at").alias("received_at"), F.count(F.lit(1)).alias("deliveries")))
    return first.select("message_type", "originating_endpoint", _latency_ms().alias("latency_ms"),
                        utc_date(F.coalesce("time_sent", "received_at")).alias("date"), "deliveries")


def with_header_columns(df: DataFrame) -> DataFrame:
    """Parse the headers JSON into a map and pull the well-known headers out as typed columns.

    ``message_id`` is the ``NServiceBus.MessageId`` header, or the native Id when it is absent (as receivers do).
    """
    parsed = df.withColumn("headers", F.from_json("headers", MapType(StringType(), StringType())))
    return (parsed
            .withColumn("native_id", F.col("id"))
            .withColumn("message_id", F.coalesce(_header(h.MESSAGE_ID), F.col("id")))
            .withColumn("enclosed_message_types", _header(h.ENCLOSED_MESSAGE_TYPES))
            .withColumn("message_type", first_message_type(F.col("enclosed_message_types")))
            .withColumn("conversation_id", _header(h.CONVERSATION_ID))
            .withColumn("correlation_id", _header(h.CORRELATION_ID))
            .withColumn("originating_endpoint", _header(h.ORIGINATING_ENDPOINT))
            .withColumn("content_type", _header(h.CONTENT_TYPE))
            .withColumn("message_intent", _header(h.MESSAGE_INTENT))
            .withColumn("time_sent", wire_time(_header(h.TIME_SENT)))
            .withColumn("latency_ms", _latency_ms())
            .withColumn("date", utc_date(F.coalesce("time_sent", "received_at"))))


def with_body_columns(df: DataFrame) -> DataFrame:
    """Decode the body: ``body_json`` (VARIANT) for JSON, ``body_text`` for other UTF-8 text, ``body_binary`` else.

    A body is JSON when it parses as JSON and its content type is absent or names JSON; ``body_kind`` says which
    column holds it (``json``, ``text``, ``binary`` or ``empty``). On PySpark 3.5 ``body_json`` is the JSON text.
    """
    text = F.col("body").cast("string")
    content_type = F.lower(F.trim(F.col("content_type")))
    json_allowed = F.coalesce(content_type.contains("json") | (content_type == ""), F.lit(True))
    if HAS_VARIANT:
        utf8 = F.when(F.is_valid_utf8(text), text)
        parsed = F.when(json_allowed, F.try_parse_json(utf8))
    else:  # 3.5: valid UTF-8 when decoding loses nothing; JSON when the whole text reads as a JSON value
        utf8 = F.when(F.encode(F.decode(F.col("body"), "UTF-8"), "UTF-8") == F.col("body"), text)
        whole = F.get_json_object(F.concat(F.lit('{"v":'), utf8, F.lit("}")), "$.v")
        parsed = F.when(json_allowed & whole.isNotNull(), utf8)
    kind = (F.when(F.col("body").isNull() | (F.length("body") == 0), F.lit("empty"))
            .when(parsed.isNotNull(), F.lit("json"))
            .when(utf8.isNotNull(), F.lit("text"))
            .otherwise(F.lit("binary")))
    return (df.withColumn("body_kind", kind)
            .withColumn("body_json", F.when(F.col("body_kind") == "json", parsed))
            .withColumn("body_text", F.when(F.col("body_kind") == "text", utf8))
            .withColumn("body_binary", F.when(F.col("body_kind") == "binary", F.col("body"))))


def deduplicate(df: DataFrame) -> DataFrame:
    """One row per ``message_id``: the first received (the drain is at-least-once; duplicates share the Id).

    ``deliveries`` counts the rows the message had in the input (1 unless it was delivered again).
    """
    same = Window.partitionBy("message_id")
    first = same.orderBy(F.col("received_at").asc_nulls_last(), "seq", "native_id")
    return (df.withColumn("_n", F.row_number().over(first)).withColumn("deliveries", F.count(F.lit(1)).over(same))
            .where(F.col("_n") == 1).drop("_n"))


def messages(raw: DataFrame) -> DataFrame:
    """Drained rows (``INPUT_SCHEMA``) to typed, deduplicated messages (``MESSAGE_COLUMNS``)."""
    return deduplicate(with_body_columns(with_header_columns(raw))).select(*MESSAGE_COLUMNS)
