"""The store: every topic of one data directory, plus consumer offsets.

Layout::

    data_dir/.lock                               flock held by the one writer (contains its pid)
    data_dir/topics/<topic>/topic.json           TopicConfig + created time
    data_dir/topics/<topic>/<p>/{base:020}.log   segments, .index, .timeindex
    data_dir/topics/<topic>/<p>/high-watermark   checkpoints, .clean-shutdown marker
    data_dir/consumers/<consumer>/<topic>/<p>    committed offset (atomic rewrite)

One process writes a data directory (an exclusive flock); any number may open
it read-only to consume.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from contraflow.atomic_files import fsync_dir, write_atomic
from contraflow.errors import UserError
from contraflow.spu.protocol.errors import (
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    TopicExistsError,
    TopicNotFoundError,
)
from contraflow.spu.protocol.topics import TopicConfig, TopicDescription, validate_name, validate_topic_name
from contraflow.spu.storage.checkpoint import read_offset, write_offset
from contraflow.spu.storage.errors import DataDirLockedError, StorageError
from contraflow.spu.storage.partition import Partition
from contraflow.spu.storage.recovery import RecoveryReport

log = logging.getLogger("contraflow.spu.storage")

LOCK_FILE = ".lock"
TOPIC_FILE = "topic.json"
RETENTION_CHECK_SECONDS = 30.0


@dataclass
class _Topic:
    name: str
    config: TopicConfig
    created_ms: int
    partitions: dict[int, Partition] = field(default_factory=dict)


class Store:
    """Topics of one data directory. Thread-safe; `close()` it (or use `with`)."""

    def __init__(
        self, data_dir: str | Path, *, read_only: bool = False, hw_follows_flush: bool = True
    ) -> None:
        self.data_dir = Path(data_dir)
        self.read_only = read_only
        # False in a cluster: the partition's leader moves the high watermark.
        self.hw_follows_flush = hw_follows_flush
        self._lock = threading.RLock()
        self._topics: dict[str, _Topic] = {}
        self._offsets: dict[tuple[str, str, int], int] = {}
        self._lock_fd: int | None = None
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closed = False
        if read_only:
            self._check_readable()
        else:
            self._acquire()
            self._flusher = threading.Thread(target=self._flush_loop, name="spu-flusher", daemon=True)
            self._flusher.start()

    @property
    def topics_dir(self) -> Path:
        return self.data_dir / "topics"

    # -- the data-directory lock ----------------------------------------------------------------

    def _acquire(self) -> None:
        try:
            self.topics_dir.mkdir(parents=True, exist_ok=True)
            (self.data_dir / "consumers").mkdir(exist_ok=True)
            fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise UserError(f"cannot use data directory {self.data_dir}: {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirLockedError(
                f"data directory {self.data_dir} is in use by another contraflow process (pid {holder}); "
                "stop it, or reach its SPU with --spu HOST:PORT"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _check_readable(self) -> None:
        if not self.data_dir.exists():
            return  # nothing there yet: no topics
        if not self.data_dir.is_dir():
            raise UserError(f"data directory {self.data_dir} is not a directory")
        if not os.access(self.data_dir, os.R_OK | os.X_OK):
            raise UserError(f"cannot read data directory {self.data_dir}: permission denied")

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(self, name: str, config: TopicConfig | None = None) -> None:
        """Create a topic atomically: built under a temporary name, then renamed."""
        validate_topic_name(name)
        config = config or TopicConfig()
        self._check_writer()
        with self._lock:
            final = self.topics_dir / name
            if final.exists():
                raise TopicExistsError(name)
            staging = self.topics_dir / f".creating-{name}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            meta = {"name": name, "created_ms": time.time_ns() // 1_000_000, "config": config.to_dict()}
            write_atomic(staging / TOPIC_FILE, orjson.dumps(meta, option=orjson.OPT_INDENT_2))
            for p in range(config.partitions):
                (staging / str(p)).mkdir()
            os.rename(staging, final)
            fsync_dir(self.topics_dir)
            log.info("created topic %s with %d partition(s)", name, config.partitions)

    def delete_topic(self, name: str) -> None:
        """Remove a topic and its consumer offsets; it disappears atomically (rename first)."""
        self._check_writer()
        with self._lock:
            topic = self._topic(name)
            for part in topic.partitions.values():
                part.discard()  # writes nothing: a topic can be deleted to free a full disk
            self._topics.pop(name, None)
            doomed = self.topics_dir / f".deleting-{name}-{time.time_ns()}"
            os.rename(self.topics_dir / name, doomed)
            fsync_dir(self.topics_dir)
            shutil.rmtree(doomed)
            for consumer_dir in (self.data_dir / "consumers").glob(f"*/{name}"):
                shutil.rmtree(consumer_dir)
            self._offsets = {k: v for k, v in self._offsets.items() if k[1] != name}
            log.info("deleted topic %s", name)

    def list_topics(self) -> list[str]:
        if not self.topics_dir.is_dir():
            return []
        return sorted(
            p.name
            for p in self.topics_dir.iterdir()
            if not p.name.startswith(".") and (p / TOPIC_FILE).exists()
        )

    def topic_config(self, name: str) -> TopicConfig:
        return self._topic(name).config

    def describe_topic(self, name: str) -> TopicDescription:
        topic = self._topic(name)
        infos = [self.partition(name, p).describe() for p in range(topic.config.partitions)]
        return TopicDescription(name, topic.config, topic.created_ms, infos)

    def _topic(self, name: str) -> _Topic:
        with self._lock:
            self._check_open()
            topic = self._topics.get(name)
            if topic is not None:
                return topic
            path = self.topics_dir / name / TOPIC_FILE
            if name.startswith(".") or "/" in name or not path.exists():
                raise TopicNotFoundError(name)
            try:
                meta: dict[str, Any] = orjson.loads(path.read_bytes())
                topic = _Topic(name, TopicConfig.from_dict(meta["config"]), int(meta["created_ms"]))
            except (ValueError, KeyError, TypeError) as err:
                raise StorageError(f"unreadable topic metadata {path}: {err}") from None
            self._topics[name] = topic
            return topic

    # -- partitions -----------------------------------------------------------------------------

    def partition(self, topic: str, number: int) -> Partition:
        """The partition, opened (and recovered) on first use."""
        with self._lock:
            t = self._topic(topic)
            if not 0 <= number < t.config.partitions:
                raise PartitionNotFoundError(topic, number, t.config.partitions)
            part = t.partitions.get(number)
            if part is None:
                directory = self.topics_dir / topic / str(number)
                part = Partition(
                    directory,
                    topic,
                    number,
                    t.config,
                    writable=not self.read_only,
                    hw_follows_flush=self.hw_follows_flush,
                )
                t.partitions[number] = part
            return part

    def recovery_reports(self) -> list[RecoveryReport]:
        with self._lock:
            return [p.recovery for t in self._topics.values() for p in t.partitions.values()]

    def enforce_retention(self, now_ms: int | None = None) -> dict[tuple[str, int], list[int]]:
        """Apply retention to every open partition; returns deleted segment bases per partition."""
        with self._lock:
            parts = [p for t in self._topics.values() for p in t.partitions.values()]
        result = {}
        for part in parts:
            deleted = part.enforce_retention(now_ms)
            if deleted:
                result[(part.topic, part.number)] = deleted
        return result

    def _flush_loop(self) -> None:
        """The time side of the flush policies, and periodic retention."""
        next_retention = time.monotonic() + RETENTION_CHECK_SECONDS
        while not self._stop.wait(self._flush_tick()):
            with self._lock:
                parts = [p for t in self._topics.values() for p in t.partitions.values()]
            for part in parts:
                if part.config.flush.mode in ("bytes", "interval"):
                    try:
                        part.flush_if_due()
                    except Exception:  # keep flushing the others; the next append reports it
                        log.exception("background flush of %s/%d failed", part.topic, part.number)
            if time.monotonic() >= next_retention:
                next_retention = time.monotonic() + RETENTION_CHECK_SECONDS
                try:
                    self.enforce_retention()
                except Exception:
                    log.exception("retention failed")

    def _flush_tick(self) -> float:
        with self._lock:
            intervals = [
                t.config.flush.interval_ms
                for t in self._topics.values()
                if t.config.flush.mode != "every_batch"
            ]
        return min(1.0, max(0.005, min(intervals, default=1000) / 2000))

    # -- consumer offsets -----------------------------------------------------------------------

    def _offset_path(self, consumer: str, topic: str, partition: int) -> Path:
        return self.data_dir / "consumers" / consumer / topic / str(partition)

    def commit_consumer_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        """Durably record `consumer`'s position (the next offset it will read)."""
        validate_name(consumer, "consumer")
        self._check_writer()
        part = self.partition(topic, partition)
        if offset < 0 or offset > part.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot commit offset {offset} for {topic}/{partition}: log end is {part.log_end_offset}"
            )
        path = self._offset_path(consumer, topic, partition)
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_offset(path, offset)
            self._offsets[(consumer, topic, partition)] = offset

    def consumer_offset(self, consumer: str, topic: str, partition: int) -> int | None:
        validate_name(consumer, "consumer")
        self.partition(topic, partition)
        with self._lock:
            key = (consumer, topic, partition)
            if key not in self._offsets:
                stored = read_offset(self._offset_path(consumer, topic, partition))
                if stored is None:
                    return None
                self._offsets[key] = stored
            return self._offsets[key]

    # -- lifecycle ------------------------------------------------------------------------------

    def _check_writer(self) -> None:
        self._check_open()
        if self.read_only:
            raise StorageError(f"store {self.data_dir} is open read-only")

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"store {self.data_dir} is closed")

    def close(self) -> None:
        """Stop the flusher, close every partition cleanly, release the lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        try:
            for topic in self._topics.values():
                for part in topic.partitions.values():
                    part.close()
        finally:
            self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_fd is None:
            return
        try:
            os.ftruncate(self._lock_fd, 0)  # no stale pid for the next error message
        finally:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
