"""Options of the `contraflow` format, parsed once with clear errors.

Names follow Spark's Kafka source where one exists (`startingOffsets`,
`maxOffsetsPerTrigger`, ...). Spark hands options over case-insensitively.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from contraflow.errors import UserError
from contraflow.spark.commit_retry import DEFAULT_COMMIT_RETRY_S
from contraflow.spark.offsets import StartingOffsets, parse_starting_offsets
from contraflow.spark.staging import DEFAULT_BYTES_PER_CONNECTION
from contraflow.spark.transform import SCHEMA_OPTION, TRANSFORM_OPTION, RowsTransform, read_transform
from contraflow.units import parse_count, parse_duration_ms

DEFAULT_SPU = "127.0.0.1:9005"
DEFAULT_MAX_RECORDS_PER_TASK = 200_000
DEFAULT_FETCH_BYTES = 4 << 20
# A task's input bytes: its writer stages about as much on one SPU connection, which the SPU caps
# (64 MiB by default), so a backlog is read in several tasks rather than one oversized one.
DEFAULT_MAX_BYTES_PER_TASK = 32 << 20


def _get(options: Mapping[str, str], name: str) -> str | None:
    """Spark lower-cases option names on some paths; look both ways."""
    value = options.get(name)
    return value if value is not None else options.get(name.lower())


def _int(options: Mapping[str, str], name: str, default: int | None = None, minimum: int = 0) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    return parse_count(raw, f"option {name}", minimum)


def spu_address(options: Mapping[str, str]) -> str:
    return _get(options, "spu") or os.environ.get("CONTRAFLOW_SPU", DEFAULT_SPU)


@dataclass(frozen=True)
class SourceOptions:
    spu: str
    topic: str
    partitions: tuple[int, ...] | None
    starting: StartingOffsets
    starting_timestamp: int | None
    max_offsets_per_trigger: int | None
    consumer: str | None
    max_records_per_task: int
    fetch_bytes: int
    max_bytes_per_task: int = DEFAULT_MAX_BYTES_PER_TASK
    transform: RowsTransform | None = None
    # `columns`: `all` (SOURCE_DDL), `payload` (value and packed headers only), `batches`
    # (one row per log batch: `contraflow.spark.log_envelopes`) or `ranges` (one row per read task
    # naming its offsets, fetched by the sink: `contraflow.spark.log_ranges`)
    columns: str = "all"
    ramp_records: int | None = None  # `rampRecords`: first batch size over a backlog (see offsets.Ramp)
    min_partitions: int | None = None  # `minPartitions`: read tasks per batch at least (one per core)
    batch_at_start: bool = False  # `batchAtStart`: a batch as soon as the query runs (see offsets.RUN_KEY)
    # `commitRetryTimeout`: how long the offset commit retries a transient error (commit_retry)
    commit_retry_s: float = DEFAULT_COMMIT_RETRY_S

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        topic = _get(options, "topic")
        if not topic:
            raise UserError("the contraflow source needs option 'topic'")
        return cls(
            spu=spu_address(options),
            topic=topic,
            partitions=_partition_list(_get(options, "partitions")),
            starting=parse_starting_offsets(_get(options, "startingOffsets")),
            starting_timestamp=_int(options, "startingTimestamp"),
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", minimum=1),
            consumer=_get(options, "consumer"),
            max_records_per_task=_int(options, "maxRecordsPerTask", DEFAULT_MAX_RECORDS_PER_TASK, 1)
            or DEFAULT_MAX_RECORDS_PER_TASK,
            fetch_bytes=_int(options, "fetchBytes", DEFAULT_FETCH_BYTES, 1024) or DEFAULT_FETCH_BYTES,
            max_bytes_per_task=_int(options, "maxBytesPerTask", DEFAULT_MAX_BYTES_PER_TASK, 1024)
            or DEFAULT_MAX_BYTES_PER_TASK,
            transform=read_transform(_get(options, TRANSFORM_OPTION)),
            columns=_columns(options),
            ramp_records=_int(options, "rampRecords", minimum=1),
            min_partitions=_int(options, "minPartitions", minimum=1),
            batch_at_start=_flag(options, "batchAtStart"),
            commit_retry_s=_seconds(options, "commitRetryTimeout", DEFAULT_COMMIT_RETRY_S),
        )


PAYLOAD_COLUMNS = "payload"
ALL_COLUMNS = "all"
BATCH_COLUMNS = "batches"
RANGE_COLUMNS = "ranges"
COLUMN_CHOICES = (ALL_COLUMNS, PAYLOAD_COLUMNS, BATCH_COLUMNS, RANGE_COLUMNS)


def _columns(options: Mapping[str, str]) -> str:
    columns = (_get(options, "columns") or ALL_COLUMNS).lower()
    if columns not in COLUMN_CHOICES:
        raise UserError(f"option columns must be one of {', '.join(COLUMN_CHOICES)}, not {columns!r}")
    return columns


def source_schema(options: Mapping[str, str], schemas: Mapping[str, str]) -> str:
    """The source's schema: what its rows transform yields (see `contraflow.spark.transform`), else
    the DDL `schemas` gives for its `columns` option."""
    explicit = _get(options, SCHEMA_OPTION)
    if explicit:
        return explicit
    return schemas[_columns(options)]


def _flag(options: Mapping[str, str], name: str) -> bool:
    raw = (_get(options, name) or "false").strip().lower()
    if raw not in ("true", "false"):
        raise UserError(f"option {name} must be true or false, not {raw!r}")
    return raw == "true"


def _partition_list(raw: str | None) -> tuple[int, ...] | None:
    if raw is None or not raw.strip():
        return None
    try:
        return tuple(sorted({int(p) for p in raw.split(",")}))
    except ValueError:
        raise UserError(
            f"option partitions must be a comma-separated list of integers, not {raw!r}"
        ) from None


@dataclass(frozen=True)
class SinkOptions:
    spu: str
    topic: str | None
    compression: str | None
    # `fetchBytes`: how much one fetch of a range row asks for (see `contraflow.spark.log_ranges`).
    fetch_bytes: int = DEFAULT_FETCH_BYTES
    # `stageBytesPerConnection`: a write task opens another connection past this many staged
    # bytes (see `contraflow.spark.staging`); below the SPU's `max_staged_bytes`.
    stage_bytes_per_connection: int = DEFAULT_BYTES_PER_CONNECTION
    # `commitRetryTimeout`: how long a commit refused for want of in-sync replicas is retried
    # (see `contraflow.spark.commit_retry`).
    commit_retry_s: float = DEFAULT_COMMIT_RETRY_S

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        return cls(
            spu=spu_address(options),
            topic=_get(options, "topic"),
            compression=_get(options, "compression"),
            fetch_bytes=_int(options, "fetchBytes", DEFAULT_FETCH_BYTES, 1024) or DEFAULT_FETCH_BYTES,
            stage_bytes_per_connection=_int(
                options, "stageBytesPerConnection", DEFAULT_BYTES_PER_CONNECTION, minimum=1
            )
            or DEFAULT_BYTES_PER_CONNECTION,
            commit_retry_s=_seconds(options, "commitRetryTimeout", DEFAULT_COMMIT_RETRY_S),
        )


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    raw = _get(options, name)
    return default if raw is None else parse_duration_ms(raw, f"option {name}") / 1000
