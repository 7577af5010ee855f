"""`s3_reader`: every object of a bucket (under a `prefix`), read once, as Tremor's does.

The keys are listed once when the connector starts; `max_connections`
objects are fetched at a time, each as its own stream (its chunks through the
preprocessors and codec in order, then its end). An object larger than
`multipart_threshold` is fetched in ranges of `multipart_chunksize` bytes.
Every event carries `$s3_reader`: `{bucket, key, size, last_modified (ns),
e_tag, range}` (`range` is `{start, end}` for a ranged fetch, else null). The
source ends once every listed object was read (like a file); a failed fetch
ends that object's stream and is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base import Connector, ConnectorContext, ConnectorError, SourceData, register
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.s3 import ENDPOINT_KEYS, S3Calls, S3Endpoint
from contraflow.stopping import STOPPED, unless_stopped

EIGHT_MB = 8 * 1024 * 1024
META = "s3_reader"


@dataclass(frozen=True)
class ReaderOptions:
    endpoint: S3Endpoint
    bucket: str
    prefix: str | None
    multipart_chunksize: int
    multipart_threshold: int
    max_connections: int


@register("s3_reader")
class S3ReaderConnector(Connector[ReaderOptions]):
    config_keys = ENDPOINT_KEYS | {"prefix", "multipart_chunksize", "multipart_threshold", "max_connections"}
    required_keys = frozenset({"bucket"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.s3 = S3Calls(self.options.endpoint)
        self._listed_all = asyncio.Event()  # every listed object is in the inbox: the source ends after it
        self.inbox = Inbox(self._listed_all)
        self._fetching: asyncio.Task[None] | None = None
        self.objects_read = 0

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ReaderOptions:
        return ReaderOptions(
            S3Endpoint.read(cfg),
            cfg.string("bucket"),
            cfg.string("prefix") if cfg.config.get("prefix") is not None else None,
            cfg.integer("multipart_chunksize", EIGHT_MB, minimum=1),
            cfg.integer("multipart_threshold", EIGHT_MB, minimum=1),
            cfg.integer("max_connections", 10, minimum=1),
        )

    async def connect(self) -> None:
        await self.s3.connect()
        if self._fetching is None:
            self._fetching = asyncio.create_task(self._fetch_all(), name=f"{self.ctx.name} s3 fetch")

    async def pull(self) -> SourceData | None:
        item = await unless_stopped(self.inbox.get(), self.ctx.quiescing)
        return None if item is STOPPED else item

    async def close(self) -> None:
        if self._fetching is not None:
            self._fetching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fetching

    async def _fetch_all(self) -> None:
        """List the keys, fetch `max_connections` objects at a time, then say the source is done."""
        keys: asyncio.Queue[tuple[int, dict[str, Any]] | None] = asyncio.Queue(self.options.max_connections)
        fetchers = [asyncio.create_task(self._fetcher(keys)) for _ in range(self.options.max_connections)]
        try:
            streams = itertools.count()
            async for listed in self._listed():
                await keys.put((next(streams), listed))
        except ConnectorError as err:
            self.ctx.logger.error("%s: listing s3://%s failed: %s", self.ctx.name, self.options.bucket, err)
            self.ctx.metrics.count("out", 0, 0, errors=1)
        finally:
            for _ in fetchers:
                await keys.put(None)
            await asyncio.gather(*fetchers)
            self._listed_all.set()

    async def _listed(self) -> Any:
        """Every object under the prefix, page by page."""
        params: dict[str, Any] = {"Bucket": self.options.bucket}
        if self.options.prefix is not None:
            params["Prefix"] = self.options.prefix
        while True:
            page = await self.s3.call("list_objects_v2", **params)
            for listed in page.get("Contents", []):
                yield listed
            if not page.get("IsTruncated"):
                return
            params["ContinuationToken"] = page["NextContinuationToken"]

    async def _fetcher(self, keys: asyncio.Queue[tuple[int, dict[str, Any]] | None]) -> None:
        while (item := await keys.get()) is not None:
            stream, listed = item
            try:
                await self._fetch(stream, listed)
                self.objects_read += 1
            except ConnectorError as err:
                self.ctx.logger.error("%s: reading %s failed: %s", self.ctx.name, listed["Key"], err)
                self.ctx.metrics.count("out", 0, 0, errors=1)
            await self.inbox.put(SourceData(stream=stream, end_stream=True))

    async def _fetch(self, stream: int, listed: dict[str, Any]) -> None:
        """One object, whole or in ranges, as chunks of stream `stream`."""
        size = listed["Size"]
        if size <= self.options.multipart_threshold:
            data = await self._get(listed["Key"], None)
            await self.inbox.put(SourceData(data=data, stream=stream, meta=self._meta(listed, None)))
            return
        step = self.options.multipart_chunksize
        for start in range(0, size, step):
            end = min(start + step, size) - 1
            data = await self._get(listed["Key"], f"bytes={start}-{end}")
            await self.inbox.put(SourceData(data=data, stream=stream, meta=self._meta(listed, (start, end))))

    async def _get(self, key: str, byte_range: str | None) -> bytes:
        params = {"Bucket": self.options.bucket, "Key": key} | ({"Range": byte_range} if byte_range else {})
        response = await self.s3.call("get_object", **params)
        return await asyncio.to_thread(response["Body"].read)

    def _meta(self, listed: Mapping[str, Any], byte_range: tuple[int, int] | None) -> dict[str, Any]:
        modified = listed.get("LastModified")
        return {
            META: {
                "bucket": self.options.bucket,
                "key": listed["Key"],
                "size": listed["Size"],
                "last_modified": int(modified.timestamp() * 1e9) if modified is not None else None,
                "e_tag": listed.get("ETag"),
                "range": {"start": byte_range[0], "end": byte_range[1]} if byte_range else None,
            }
        }

    def status(self) -> dict[str, Any]:
        return {"objects_read": self.objects_read, "finished": self._listed_all.is_set()}
