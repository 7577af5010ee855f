"""`otel_client`: events in Tremor's otel shape sent to an OTLP/gRPC collector (Tremor's).

Config (`base.otel_options`): `url` (`localhost:4317`), `logs`, `metrics`,
`trace` (true): which signals are sent, `compression` (`none`, `gzip`) of the requests.

Each event's `logs`, `metrics` and `trace` lists (as `otel_server` makes them,
`base.otlp`) are sent as one export request each, to the matching service;
`send` returns once the collector answered OK for every event of the batch,
so the runtime acknowledges upstream only what the collector took.

- An event with none of the switched-on keys, or not in the shape (a span
  id that is not hex, a string where a number goes), goes to `err` with the
  reason; the rest of the batch is sent.
- The collector unreachable or answering UNAVAILABLE (it is gone, or
  overloaded, as OTLP says to retry): `ConnectionLost`, so the breaker opens
  and `connect()` (a new channel, ready or refused within 2 s) is retried
  by the `reconnect` policy until the collector is back, then the batch is sent again; events of the batch already exported are not sent twice.
- Any other status (INVALID_ARGUMENT, UNIMPLEMENTED for a service the
  collector lacks...) is that event's failure: `err`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from contraflow.connectors.base import (
    ConnectionLost,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    register,
)
from contraflow.connectors.base.marks import DeliveryMarks
from contraflow.connectors.base.otel_options import OtelConnector
from contraflow.connectors.base.otlp import OtlpShapeError, Signal, event_to_request

# How long `connect` waits for the collector to accept a connection.
CONNECT_TIMEOUT_S = 2.0
# How long one export call may take before it counts as lost.
EXPORT_TIMEOUT_S = 10.0
# Statuses that say the collector is not there (or cannot take data now): retry after reconnecting.
RETRY_STATUSES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class EventRejected(Exception):
    """This event cannot be exported (bad shape, or the collector refused it for good)."""


async def _connected(channel: grpc.aio.Channel) -> bool:
    """Connect `channel`: True once ready, False as soon as the attempt fails (refused: no waiting)."""
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN):
            return False
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)
    return True


@register("otel_client")
class OtelClientConnector(OtelConnector):
    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self._channel: grpc.aio.Channel | None = None
        self._stubs: dict[str, Any] = {}
        self._exported = DeliveryMarks()  # what a batch sent again after a reconnect skips

    async def connect(self) -> None:
        await self._close_channel()
        url = self.options.url
        channel = grpc.aio.insecure_channel(f"{url.host}:{url.port}", compression=self.options.compression)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):  # not wait_for, which may swallow a cancel (3.11)
                ready = await _connected(channel)
        except TimeoutError:
            ready = False
        if not ready:
            await channel.close()
            raise ConnectionLost(f"no OTLP/gRPC collector answers at {url}")
        self._channel = channel
        self._stubs = {signal.key: signal.stub(channel) for signal in self.options.signals}

    async def send(self, events: Sequence[SinkEvent]) -> None:
        rejected: list[SinkEvent] = []
        reasons: list[str] = []
        for event in events:
            if self._exported.covers(event) and event.offset >= 0:
                continue
            try:
                await self._export(event)
            except EventRejected as err:
                rejected.append(event)
                reasons.append(str(err))
            if event.offset >= 0 and event.channel:
                self._exported.add(event)
        if rejected:
            raise DeliveryFailed("; ".join(dict.fromkeys(reasons)), rejected=rejected)

    async def _export(self, event: SinkEvent) -> None:
        requests = self._requests(event.value())
        for signal, request in requests:
            try:
                await self._stubs[signal.key].Export(request, timeout=EXPORT_TIMEOUT_S)
            except grpc.aio.AioRpcError as err:
                if err.code() in RETRY_STATUSES:
                    raise ConnectionLost(f"{signal.key} export: {err.code().name}: {err.details()}") from err
                raise EventRejected(f"{signal.key} export: {err.code().name}: {err.details()}") from err

    def _requests(self, value: Any) -> list[tuple[Signal, Message]]:
        """The export requests of one event: one per switched-on signal key it has."""
        present = [s for s in self.options.signals if isinstance(value, dict) and s.key in value]
        if not present:
            keys = ", ".join(s.key for s in self.options.signals) or "none (all switched off)"
            raise EventRejected(f"not an otel event: it has none of the keys {keys}")
        try:
            return [(signal, event_to_request(signal, value)) for signal in present]
        except OtlpShapeError as err:
            raise EventRejected(f"not in Tremor's otel shape: {err}") from err

    async def _close_channel(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            self._stubs = {}
            await channel.close()

    async def close(self) -> None:
        await self._close_channel()
