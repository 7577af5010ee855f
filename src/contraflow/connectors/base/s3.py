"""What `s3_reader` and `s3_streamer` share: Tremor's endpoint keys, the boto3 client, what errors mean.

Credentials come the AWS SDK's usual ways (`AWS_ACCESS_KEY_ID` and
`AWS_SECRET_ACCESS_KEY`, the credentials file, instance metadata), as in
Tremor. boto3 is synchronous: every call runs in a worker thread
(`S3Calls.call`), so the event loop never waits on S3.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import boto3
import botocore.config
import botocore.exceptions

from contraflow.connectors.base import ConnectionLost, DeliveryFailed
from contraflow.connectors.base.options import ConfigReader

T = TypeVar("T")

ENDPOINT_KEYS = frozenset({"aws_region", "url", "bucket", "path_style_access"})
# Failures of the way to S3, not of the request: the breaker opens and the runtime reconnects.
UNREACHABLE = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectTimeoutError,
)


@dataclass(frozen=True)
class S3Endpoint:
    """Where the bucket is: Tremor's `aws_region`, `url` (S3 or a compatible store), `path_style_access`."""

    region: str | None
    url: str | None
    bucket: str | None
    path_style: bool

    @classmethod
    def read(cls, cfg: ConfigReader) -> S3Endpoint:
        def optional(key: str) -> str | None:
            return cfg.string(key) if cfg.config.get(key) is not None else None

        return cls(
            optional("aws_region"),
            optional("url"),
            optional("bucket"),
            cfg.boolean("path_style_access", True),
        )

    def client(self) -> Any:
        style = "path" if self.path_style else "virtual"
        config = botocore.config.Config(s3={"addressing_style": style}, retries={"max_attempts": 2})
        return boto3.client("s3", region_name=self.region, endpoint_url=self.url, config=config)


class S3Calls:
    """One boto3 client, its calls in a worker thread, their failures as the runtime's errors."""

    def __init__(self, endpoint: S3Endpoint) -> None:
        self.endpoint = endpoint
        self._client: Any = None

    async def connect(self) -> None:
        """Make the client and check the default bucket (if any) is there: a missing one is a
        failed connect, so the breaker stays open and says why."""
        self._client = await asyncio.to_thread(self.endpoint.client)
        if self.endpoint.bucket is not None:
            try:
                await self.call("head_bucket", Bucket=self.endpoint.bucket)
            except DeliveryFailed as err:
                raise ConnectionLost(f"cannot access bucket '{self.endpoint.bucket}': {err}") from err

    async def call(self, method: str, **params: Any) -> Any:
        """`client.<method>(**params)` in a worker thread: unreachable -> `ConnectionLost`, refused ->
        `DeliveryFailed` (retryable for throttling and server errors)."""
        if self._client is None:
            raise ConnectionLost("not connected to S3")
        return await asyncio.to_thread(_translated, getattr(self._client, method), params)


class UploadGone(DeliveryFailed):
    """The multipart upload named is not there (any more): S3 was restarted without its state, or a
    lifecycle rule aborted it. Whatever parts it held are gone with it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, retryable=False)


def _translated(method: Callable[..., T], params: Mapping[str, Any]) -> T:
    try:
        return method(**params)
    except UNREACHABLE as err:
        raise ConnectionLost(f"S3 unreachable: {err}") from err
    except botocore.exceptions.ClientError as err:
        if err.response.get("Error", {}).get("Code") == "NoSuchUpload":
            raise UploadGone(f"S3 {method.__name__}: {err}") from err
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        raise DeliveryFailed(
            f"S3 {method.__name__}: {err}", retryable=status >= 500 or status == 429
        ) from err
