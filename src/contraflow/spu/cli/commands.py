"""`contraflow topic|produce|consume`: the log from the command line.

Commands talk to a `LogClient`, so they work the same against the local data
directory and an SPU: `--spu`, or the runtime running from the data directory. Every user mistake surfaces as a
`UserError`: one `error: ...` line, non-zero exit, no traceback. Numeric
options are parsed here rather than by click so that holds for them too.
"""

from __future__ import annotations

import functools
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import click
import crc32c
import orjson

from contraflow.discovery import log_dir, running_runtime
from contraflow.errors import UserError
from contraflow.security import use_tls_ca
from contraflow.spu.api import LocalLog, LogClient
from contraflow.spu.protocol import Acks
from contraflow.spu.protocol.fetch import OffsetSpec
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.storage.errors import StorageError
from contraflow.units import parse_count, parse_duration_ms, parse_size, parse_time_ms

if TYPE_CHECKING:
    from contraflow.spu.storage.partition import Partition

DEFAULT_DATA_DIR = "contraflow-data"
PRODUCE_BATCH_LINES = 1000
PRODUCE_LINGER_S = 0.010
CONSUME_POLL_S = 0.1
CONSUME_FETCH_BYTES = 1 << 20

F = TypeVar("F", bound=Callable[..., Any])
ACKS = {"all": Acks.COMMITTED, "leader": Acks.LEADER, "none": Acks.NONE}


def _errors_as_user_errors(func: F) -> F:
    """Storage and OS failures reach the user as one line, like their own mistakes."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except UserError:
            raise
        except StorageError as err:
            raise UserError(str(err)) from None
        except OSError as err:
            where = f" ({err.filename})" if err.filename else ""
            raise UserError(f"{err.strerror or err}{where}") from None

    return wrapper  # type: ignore[return-value]


# The log's data directory, for commands that open it (or, with `data_dir_option`, an SPU instead).
log_data_dir_option = click.option(
    "--data-dir",
    envvar="CONTRAFLOW_DATA_DIR",
    default=DEFAULT_DATA_DIR,
    show_default=True,
    metavar="DIR",
    help="Data directory of the log or of `contraflow run` (or $CONTRAFLOW_DATA_DIR); "
    "a runtime running from it is used through its SPU.",
)
SPU_CONTEXT_KEY = "contraflow.spu"
_spu_option = click.option(
    "--spu",
    envvar="CONTRAFLOW_SPU",
    metavar="HOST:PORT",
    expose_value=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__(SPU_CONTEXT_KEY, value),
    help="Use the SPU server at HOST:PORT instead of a data directory (or $CONTRAFLOW_SPU).",
)


_tls_ca_option = click.option(
    "--tls-ca",
    envvar="CONTRAFLOW_TLS_CA",
    metavar="FILE",
    expose_value=False,
    callback=lambda _ctx, _param, value: use_tls_ca(value),
    help="Talk TLS to the SPU, verifying it against this CA certificate (or $CONTRAFLOW_TLS_CA).",
)


def data_dir_option(command: F) -> F:
    """Where the log is: --data-dir DIR, or --spu HOST:PORT for a running SPU (--tls-ca for TLS)."""
    return log_data_dir_option(_spu_option(_tls_ca_option(command)))


def open_log(data_dir: str, *, read_only: bool) -> LogClient:
    """The log the commands use: the SPU given by --spu, else the SPU of the runtime running
    from the data directory, else the data directory's log files (see contraflow.discovery)."""
    spu = click.get_current_context().meta.get(SPU_CONTEXT_KEY)
    if not spu:
        running = running_runtime(Path(data_dir))
        spu = running.spu if running else None
    if spu:
        from contraflow.spu.client import SpuClient

        return SpuClient(spu)
    return LocalLog(log_dir(Path(data_dir)), read_only=read_only)


# -- topic ----------------------------------------------------------------------------------------


@click.group()
def topic() -> None:
    """Create, list, describe and delete topics."""


@topic.command("create")
@click.argument("name")
@click.option("--partitions", default="1", metavar="N", show_default=True, help="Number of partitions.")
@click.option(
    "--segment-size", default=None, metavar="BYTES", help="Roll segments at this size (default 1GiB)."
)
@click.option(
    "--retention-time", default=None, metavar="DURATION", help="Delete segments older than this (7d, 12h)."
)
@click.option("--retention-bytes", default=None, metavar="BYTES", help="Keep about this much per partition.")
@click.option(
    "--replication-factor",
    default="1",
    metavar="R",
    show_default=True,
    help="Copies of each partition (a cluster).",
)
@click.option(
    "--min-in-sync-replicas",
    default="1",
    metavar="M",
    show_default=True,
    help="acks=all produces fail while fewer replicas are in sync.",
)
@data_dir_option
@_errors_as_user_errors
def topic_create(
    name: str,
    partitions: str,
    segment_size: str | None,
    retention_time: str | None,
    retention_bytes: str | None,
    replication_factor: str,
    min_in_sync_replicas: str,
    data_dir: str,
) -> None:
    """Create topic NAME."""
    kwargs: dict[str, Any] = {
        "partitions": parse_count(partitions, "partition count", minimum=1),
        "replication_factor": parse_count(replication_factor, "replication factor", minimum=1),
        "min_in_sync_replicas": parse_count(min_in_sync_replicas, "min in-sync replicas", minimum=1),
    }
    if segment_size is not None:
        kwargs["segment_bytes"] = parse_size(segment_size, "segment size")
    if retention_time is not None:
        kwargs["retention_ms"] = parse_duration_ms(retention_time, "retention time")
    if retention_bytes is not None:
        kwargs["retention_bytes"] = parse_size(retention_bytes, "retention bytes")
    try:
        config = TopicConfig(**kwargs)
    except ValueError as err:
        raise UserError(str(err)) from None
    log = open_log(data_dir, read_only=False)
    try:
        log.create_topic(name, config)
    finally:
        log.close()
    click.echo(f"topic {name!r} created with {config.partitions} partition(s)")


@topic.command("list")
@data_dir_option
@_errors_as_user_errors
def topic_list(data_dir: str) -> None:
    """List topics, one per line."""
    log = open_log(data_dir, read_only=True)
    try:
        for name in log.list_topics():
            click.echo(name)
    finally:
        log.close()


@topic.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the description as one JSON object.")
@data_dir_option
@_errors_as_user_errors
def topic_describe(name: str, as_json: bool, data_dir: str) -> None:
    """Show a topic's settings and, per partition, its offsets and size (in a cluster also
    leader, replicas, in-sync replicas and leader epoch)."""
    log = open_log(data_dir, read_only=True)
    try:
        desc = log.describe_topic(name)
    finally:
        log.close()
    if as_json:
        click.echo(orjson.dumps(desc.to_dict()).decode())
        return
    cfg = desc.config
    click.echo(f"topic: {desc.name}")
    click.echo(f"partitions: {cfg.partitions}")
    click.echo(f"segment size: {cfg.segment_bytes}")
    click.echo(f"retention time: {'none' if cfg.retention_ms is None else f'{cfg.retention_ms} ms'}")
    click.echo(f"retention bytes: {'none' if cfg.retention_bytes is None else cfg.retention_bytes}")
    click.echo(f"flush: {cfg.flush.mode}")
    click.echo(
        f"{'partition':>9} {'log start':>12} {'log end':>12} {'high watermark':>15} {'size':>14} {'segments':>8}"
    )
    for p in desc.partitions:
        click.echo(
            f"{p.partition:>9} {p.log_start_offset:>12} {p.log_end_offset:>12} "
            f"{p.high_watermark:>15} {p.size_bytes:>14} {p.segment_count:>8}"
        )
    if any(p.leader_epoch is not None for p in desc.partitions):
        click.echo(
            f"replication factor: {cfg.replication_factor}, min in-sync replicas: {cfg.min_in_sync_replicas}"
        )
        click.echo(f"{'partition':>9} {'leader':>6} {'epoch':>6}  {'replicas':<12} {'in sync':<12}")
        for p in desc.partitions:
            leader = "none" if p.leader is None else str(p.leader)
            replicas = ",".join(map(str, p.replicas))
            in_sync = ",".join(map(str, p.in_sync_replicas))
            click.echo(f"{p.partition:>9} {leader:>6} {p.leader_epoch:>6}  {replicas:<12} {in_sync:<12}")
    for p in desc.partitions:
        if p.corrupt_batches:
            click.echo(f"partition {p.partition}: {p.corrupt_batches} corrupt batch(es) met by reads")
        for line in p.damage:
            click.echo(f"partition {p.partition}: {line}")


# `topic verify`'s exit status for a log found damaged; bad input (an unknown topic or
# partition, an unusable data directory) exits 2 like every other command's.
DAMAGE_EXIT_CODE = 1


@topic.command("verify")
@click.argument("name")
@log_data_dir_option
@click.option("--partition", default=None, metavar="P", help="Verify only partition P (default: all).")
@_errors_as_user_errors
def topic_verify(name: str, data_dir: str, partition: str | None) -> None:
    """CRC-check every batch of topic NAME on disk (a scrub), naming each bad batch.

    Exit status: 0 intact, 1 damage found, 2 bad input (unknown topic or partition, unusable
    data directory).

    It reads the data directory's files read-only, whether or not an SPU runs
    from it, and writes nothing. A running SPU does the same in the background
    at start-up, so that reads do not have to (docs/spu-storage.md)."""
    from contraflow.spu.storage.store import Store

    store = Store(log_dir(Path(data_dir)), read_only=True)
    try:
        bad = sum(
            _verify_partition(store.partition(name, p))
            for p in _chosen_partitions(name, store.topic_config(name).partitions, partition)
        )
    finally:
        store.close()
    if bad:
        raise UserError(
            f"topic {name!r}: {bad} bad stretch(es) of the log, listed above", exit_code=DAMAGE_EXIT_CODE
        )


def _verify_partition(part: Partition) -> int:
    """Verify one partition, print what was checked and what is bad; returns the bad count."""
    started = time.monotonic()
    damage = [str(cut) for cut in part.recovery.truncated] + part.verify()
    size = sum(seg.size for seg in part.segments)
    verdict = "ok" if not damage else f"{len(damage)} bad"
    click.echo(
        f"{part.topic}/{part.number}: offsets {part.log_start_offset}..{part.log_end_offset - 1}, "
        f"{len(part.segments)} segment(s), {size} bytes checked in {time.monotonic() - started:.2f} s: {verdict}"
    )
    for line in damage:
        click.echo(f"  {line}")
    return len(damage)


def _chosen_partitions(topic: str, count: int, partition: str | None) -> list[int]:
    """All `count` partitions, or the one `--partition` names (checked against the topic)."""
    if partition is None:
        return list(range(count))
    p = parse_count(partition, "partition", minimum=0)
    if p >= count:
        raise UserError(f"topic {topic!r} has no partition {p} (it has {count}: 0..{count - 1})")
    return [p]


@topic.command("delete")
@click.argument("name")
@data_dir_option
@_errors_as_user_errors
def topic_delete(name: str, data_dir: str) -> None:
    """Delete topic NAME and all its data."""
    log = open_log(data_dir, read_only=False)
    try:
        log.delete_topic(name)
    finally:
        log.close()
    click.echo(f"topic {name!r} deleted")


# -- produce --------------------------------------------------------------------------------------


def read_line_batches(stream: BinaryIO, max_lines: int, linger_s: float) -> Iterator[list[bytes]]:
    """Lines of `stream` (without their newline) in batches of up to `max_lines`; a
    partial batch goes out once its first line has waited `linger_s` (interactive use)."""
    fd = stream.fileno()
    pending: list[bytes] = []
    tail = b""
    deadline = 0.0
    while True:
        timeout = max(0.0, deadline - time.monotonic()) if pending else None
        ready, _, _ = select.select([fd], [], [], timeout)
        chunk = os.read(fd, 1 << 16) if ready else None
        if chunk == b"":
            if tail:
                pending.append(tail)
            if pending:
                yield pending
            return
        if chunk:
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            if lines and not pending:
                deadline = time.monotonic() + linger_s
            pending.extend(lines)
        while len(pending) >= max_lines:
            yield pending[:max_lines]
            pending = pending[max_lines:]
            deadline = time.monotonic() + linger_s
        if pending and (chunk is None or time.monotonic() >= deadline):
            yield pending
            pending = []


def split_keys(lines: list[bytes], separator: bytes, first_line: int) -> tuple[list[bytes], list[bytes]]:
    keys, values = [], []
    for n, line in enumerate(lines, start=first_line):
        key, sep, value = line.partition(separator)
        if not sep:
            raise UserError(f"line {n} has no key separator {separator.decode()!r}")
        keys.append(key)
        values.append(value)
    return keys, values


@click.command()
@click.argument("name")
@data_dir_option
@click.option("--key-separator", default=None, metavar="SEP", help="Split each line into key SEP value.")
@click.option("--partition", default=None, metavar="P", help="Write to this partition only.")
@click.option(
    "--acks",
    type=click.Choice(["all", "leader", "none"]),
    default="all",
    show_default=True,
    help="Answer once the in-sync replicas hold a batch (all), the leader does, or not at all.",
)
@_errors_as_user_errors
def produce(name: str, data_dir: str, key_separator: str | None, partition: str | None, acks: str) -> None:
    """Append one record per line of standard input to topic NAME.

    Keyed records go to the partition chosen by the key's hash; others are
    spread over the partitions batch by batch."""
    if key_separator == "":
        raise UserError("the key separator must not be empty")
    log = open_log(data_dir, read_only=False)
    send = _producer(log, ACKS[acks])
    try:
        count = log.describe_topic(name).config.partitions
        fixed = None if partition is None else parse_count(partition, "partition", minimum=0)
        if fixed is not None and fixed >= count:
            raise UserError(f"topic {name!r} has no partition {fixed} (it has {count}: 0..{count - 1})")
        line_no, next_partition = 1, 0
        for lines in read_line_batches(sys.stdin.buffer, PRODUCE_BATCH_LINES, PRODUCE_LINGER_S):
            if key_separator is None:
                target = next_partition if fixed is None else fixed
                send(name, target, lines, None)
                next_partition = (next_partition + 1) % count
            else:
                keys, values = split_keys(lines, key_separator.encode(), line_no)
                _produce_keyed(send, name, count, fixed, keys, values)
            line_no += len(lines)
    finally:
        log.close()


Send = Callable[[str, int, list[bytes], list[bytes] | None], object]


def _producer(log: LogClient, acks: Acks) -> Send:
    """produce(topic, partition, values, keys) at the acks level (an SPU's; a directory has none)."""
    from contraflow.spu.client import SpuClient

    if isinstance(log, SpuClient):
        spu = log
        return lambda topic, p, values, keys: spu.produce(topic, p, values, keys=keys, acks=acks)
    return lambda topic, p, values, keys: log.produce(topic, p, values, keys=keys)


def _produce_keyed(
    send: Send, topic: str, count: int, fixed: int | None, keys: list[bytes], values: list[bytes]
) -> None:
    """Group a batch by partition (hash of the key) and append one batch per partition."""
    groups: dict[int, tuple[list[bytes], list[bytes]]] = {}
    for key, value in zip(keys, values, strict=True):
        p = fixed if fixed is not None else crc32c.crc32c(key) % count
        group = groups.setdefault(p, ([], []))
        group[0].append(key)
        group[1].append(value)
    for p, (group_keys, group_values) in groups.items():
        send(topic, p, group_values, group_keys)


# -- consume --------------------------------------------------------------------------------------


def _start_offset(log: LogClient, topic: str, p: int, start: OffsetSpec | None, offset: int | None) -> int:
    if offset is not None:
        first = log.list_offsets(topic, p, "earliest")
        end = log.list_offsets(topic, p, "latest", isolation="uncommitted")
        assert first is not None and end is not None
        if offset > end:
            raise UserError(
                f"offset {offset} is out of range for {topic}/{p} (log start {first}, log end {end})"
            )
        return offset
    if start is None:
        start = "latest"
    found = log.list_offsets(topic, p, start)
    if found is None:  # no record at or after that time yet: wait at the end
        found = log.list_offsets(topic, p, "latest")
        assert found is not None
    return found


@click.command()
@click.argument("name")
@data_dir_option
@click.option("-B", "from_beginning", is_flag=True, help="Start at the beginning of the log.")
@click.option("--offset", default=None, metavar="N", help="Start at offset N.")
@click.option("--from-time", default=None, metavar="TIME", help="Start at the first record at or after TIME.")
@click.option("-d", "exit_at_end", is_flag=True, help="Exit once the end of the log is reached.")
@click.option("--partition", default=None, metavar="P", help="Read only partition P (default: all).")
@_errors_as_user_errors
def consume(
    name: str,
    data_dir: str,
    from_beginning: bool,
    offset: str | None,
    from_time: str | None,
    exit_at_end: bool,
    partition: str | None,
) -> None:
    """Print the values of topic NAME, one per line (from the end unless told otherwise)."""
    if sum((from_beginning, offset is not None, from_time is not None)) > 1:
        raise UserError("choose at most one of -B, --offset and --from-time")
    start_offset = None if offset is None else parse_count(offset, "offset", minimum=0)
    start: OffsetSpec | None = "earliest" if from_beginning else None
    if from_time is not None:
        start = parse_time_ms(from_time)
    log = open_log(data_dir, read_only=True)
    try:
        partitions = _chosen_partitions(name, log.describe_topic(name).config.partitions, partition)
        positions = {p: _start_offset(log, name, p, start, start_offset) for p in partitions}
        _consume_loop(log, name, positions, exit_at_end)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `consume ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        log.close()


def _consume_loop(log: LogClient, topic: str, positions: dict[int, int], exit_at_end: bool) -> None:
    out = sys.stdout.buffer
    while True:
        progressed = False
        for p, position in positions.items():
            result = log.fetch(topic, p, position, CONSUME_FETCH_BYTES)
            for batch in result.batches:
                values = batch.values()
                skip = max(0, position - batch.base_offset)
                if skip < len(values):
                    out.write(b"\n".join(values[skip:]))
                    out.write(b"\n")
            if result.batches:
                progressed = True
            positions[p] = result.next_offset
        out.flush()
        if not progressed:
            if exit_at_end:
                return
            time.sleep(CONSUME_POLL_S)
