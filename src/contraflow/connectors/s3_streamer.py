"""`s3_streamer`: events into S3 objects by multipart upload (Tremor's), acknowledged once an object is complete.

Each event names its object in its metadata: `$s3_streamer.name` (the key),
`$s3_streamer.bucket` (else the config's `bucket`). Events for one object are
encoded (codec, postprocessors) and appended to it; a part is uploaded each
time `buffer_size` bytes are waiting (at least 5 MB, S3's smallest part); the
object is completed when an event names another object, and when the flow
stops. An event without a name, or whose object failed, goes to `err`.

This is a holding sink (see `Connector.settle`): in `mode = "consistent"`
its events are released, so their channel offsets committed and their
sources acknowledged, only once their object is complete; a crash before that
sends them again and the object is written anew (the upload the crash left
is aborted when its key is started again). After a lost connection, the
upload being written is checked: if S3 came back without it and none of its
parts was sent, it is begun again from the bytes still waiting. In `mode = "yolo"` (Tremor's
default) events are released as soon as they are taken: a crash loses the
object being written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    register,
)
from contraflow.connectors.base.marks import DeliveryMarks
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.s3 import ENDPOINT_KEYS, S3Calls, S3Endpoint, UploadGone

MIN_PART_BYTES = 5 * 1024 * 1024 + 100  # S3's smallest part, and a little more (as Tremor has it)
META = "s3_streamer"


@dataclass(frozen=True)
class StreamerOptions:
    endpoint: S3Endpoint
    consistent: bool
    buffer_size: int


@dataclass
class Upload:
    """One object being written: its multipart upload, the parts sent, the bytes waiting, its events."""

    bucket: str
    key: str
    upload_id: str
    parts: list[dict[str, Any]] = field(default_factory=list)
    buffer: bytearray = field(default_factory=bytearray)
    events: DeliveryMarks = field(default_factory=DeliveryMarks)
    failed: str | None = None  # why, once a part or the completion was refused

    @property
    def name(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


class ObjectRejected(Exception):
    """This event cannot go into an object (no name, or its object failed)."""


@register("s3_streamer")
class S3StreamerConnector(Connector[StreamerOptions]):
    config_keys = ENDPOINT_KEYS | {"mode", "buffer_size"}

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.s3 = S3Calls(self.options.endpoint)
        self.upload: Upload | None = None
        self.taken = DeliveryMarks()  # every event taken: a batch sent again skips them
        self.completed = 0

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> StreamerOptions:
        mode = cfg.choice("mode", {"yolo", "consistent"}, "yolo")
        buffer_size = max(cfg.integer("buffer_size", MIN_PART_BYTES, minimum=1), MIN_PART_BYTES)
        return StreamerOptions(S3Endpoint.read(cfg), mode == "consistent", buffer_size)

    async def connect(self) -> None:
        await self.s3.connect()
        if self.upload is not None:  # a reconnect while writing an object
            await self._check_upload(self.upload)

    async def _check_upload(self, upload: Upload) -> None:
        """Is the upload being written still there? S3 (or a compatible store) may have come back
        without it. If none of its parts was sent, every byte is still waiting here: it is begun
        again. Otherwise what S3 held of it is lost, and the object fails."""
        part = {"Bucket": upload.bucket, "Key": upload.key, "UploadId": upload.upload_id}
        try:
            await self.s3.call("list_parts", MaxParts=1, **part)
        except UploadGone as err:
            if upload.parts:
                upload.failed = str(err)
                return
            self.ctx.logger.info("%s: the upload of %s is gone, begun again", self.ctx.name, upload.name)
            upload.upload_id = await self._create(upload.bucket, upload.key)
        except DeliveryFailed as err:
            raise ConnectionLost(f"cannot check the upload of {upload.name}: {err}") from err

    async def send(self, events: Sequence[SinkEvent]) -> None:
        rejected: list[SinkEvent] = []
        taken = DeliveryMarks()
        await self._upload_full_parts()  # a batch sent again after a failed part: that part first
        for event in events:
            if self.taken.covers(event):
                continue
            try:
                upload = await self._upload_for(event)
            except ObjectRejected as err:
                self.ctx.logger.warning("%s: %s", self.ctx.name, err)
                rejected.append(event)
                self.taken.add(event)
                continue
            upload.buffer += b"".join(event.frames)
            upload.events.add(event)
            self.taken.add(event)
            taken.add(event)
            await self._upload_full_parts()
        if not self.options.consistent:
            self.ctx.release(taken.offsets)
        if rejected:
            raise DeliveryFailed("not written to S3 (see the log)", rejected=rejected)

    async def settle(self) -> None:
        """The flow stops (or drains): complete the object being written."""
        await self._finish()

    async def _upload_for(self, event: SinkEvent) -> Upload:
        """The upload `event` goes into: the current one, or a new one once the current is complete."""
        bucket, key = self._object_of(event.meta)
        upload = self.upload
        if upload is not None and (upload.bucket, upload.key) == (bucket, key):
            if upload.failed is not None:
                raise ObjectRejected(f"{upload.name} failed: {upload.failed}")
            return upload
        await self._finish()
        await self._abort_left_over(bucket, key)
        self.upload = Upload(bucket, key, await self._create(bucket, key))
        return self.upload

    async def _create(self, bucket: str, key: str) -> str:
        created = await self.s3.call("create_multipart_upload", Bucket=bucket, Key=key)
        upload_id: str = created["UploadId"]
        return upload_id

    def _object_of(self, meta: Mapping[str, Any]) -> tuple[str, str]:
        ours = meta.get(META)
        ours = ours if isinstance(ours, dict) else {}
        key, bucket = ours.get("name"), ours.get("bucket", self.options.endpoint.bucket)
        if not isinstance(key, str) or not key:
            raise ObjectRejected(f"`${META}.name` metadata is missing or not a string: {key!r}")
        if not isinstance(bucket, str) or not bucket:
            raise ObjectRejected(f"`${META}.bucket` metadata is missing (and no `bucket` configured)")
        return bucket, key

    async def _abort_left_over(self, bucket: str, key: str) -> None:
        """Uploads of this key a killed run left open: the object is written anew, they never complete."""
        listed = await self.s3.call("list_multipart_uploads", Bucket=bucket, Prefix=key)
        for left in listed.get("Uploads", []):
            if left["Key"] == key:
                await self.s3.call(
                    "abort_multipart_upload", Bucket=bucket, Key=key, UploadId=left["UploadId"]
                )

    async def _upload_full_parts(self) -> None:
        upload = self.upload
        while upload is not None and upload.failed is None and len(upload.buffer) >= self.options.buffer_size:
            await self._upload_part(upload, self.options.buffer_size)

    async def _upload_part(self, upload: Upload, size: int) -> None:
        """Send the first `size` bytes waiting as the next part. They stay waiting when S3 cannot be
        reached or asks to retry (raised: the runtime sends the batch again); a refusal fails the object."""
        number = len(upload.parts) + 1
        part = {
            "Bucket": upload.bucket,
            "Key": upload.key,
            "UploadId": upload.upload_id,
            "PartNumber": number,
        }
        try:
            sent = await self.s3.call("upload_part", Body=bytes(upload.buffer[:size]), **part)
        except DeliveryFailed as err:
            if err.retryable:
                raise
            upload.failed = str(err)
            return
        upload.parts.append({"PartNumber": number, "ETag": sent["ETag"]})
        del upload.buffer[:size]

    async def _finish(self) -> None:
        """Complete the current object (the rest waiting is its last part) and release its events; a
        failed one is aborted. Raises (keeping the upload) when S3 cannot be reached or asks to retry."""
        upload = self.upload
        if upload is None:
            return
        if upload.failed is None:
            try:
                await self._complete(upload)
            except DeliveryFailed as err:
                if err.retryable:
                    raise
                upload.failed = str(err)
        self.upload = None
        if upload.failed is not None:
            self.ctx.logger.error("%s: %s not written: %s", self.ctx.name, upload.name, upload.failed)
            self.ctx.metrics.count("in", 0, 0, errors=1)
            with contextlib.suppress(UploadGone):  # nothing left to abort
                await self.s3.call(
                    "abort_multipart_upload", Bucket=upload.bucket, Key=upload.key, UploadId=upload.upload_id
                )
        else:
            self.completed += 1
        if self.options.consistent:
            self.ctx.release(upload.events.offsets)

    async def _complete(self, upload: Upload) -> None:
        if upload.buffer or not upload.parts:  # an object needs a part, even an empty one
            await self._upload_part(upload, len(upload.buffer))
            if upload.failed is not None:
                return
        await self.s3.call(
            "complete_multipart_upload",
            Bucket=upload.bucket,
            Key=upload.key,
            UploadId=upload.upload_id,
            MultipartUpload={"Parts": upload.parts},
        )

    def status(self) -> dict[str, Any]:
        upload = self.upload
        writing = (
            {"object": upload.name, "parts": len(upload.parts), "buffered": len(upload.buffer)}
            if upload
            else None
        )
        return {"writing": writing, "completed": self.completed}
