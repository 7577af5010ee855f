"""Building connectors the way the runtime does, without the runtime: a context, codecs, chains."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import orjson

from contraflow.codecs import preprocessors
from contraflow.connectors.base import Connector, ConnectorContext, SinkEvent, connector_class
from contraflow.lang.graph import ConnectorSpec, PluginRef

T = TypeVar("T")


def plugin(spec: str | tuple[str, dict[str, Any]]) -> PluginRef:
    return PluginRef(spec, {}) if isinstance(spec, str) else PluginRef(spec[0], spec[1])


def make(
    kind: str,
    config: dict[str, Any],
    *,
    alias: str = "c",
    state_dir: Path | None = None,
    spu_addr: str | None = None,
    codec: str | None = "json",
    preprocessors: list[Any] | None = None,
    postprocessors: list[Any] | None = None,
    stop_runtime: Callable[[], None] = lambda: None,
    breaker: list[str] | None = None,
    outputs: frozenset[str] = frozenset({"out", "err"}),
    inputs: frozenset[str] = frozenset({"in"}),
) -> Connector:
    """A connector instance with a context as the runtime builds one (config checked first)."""
    cls = connector_class(kind)
    cls.check_config(alias, config)
    spec = ConnectorSpec(
        alias=alias,
        definition=alias,
        kind=kind,
        config=config,
        codec=plugin(codec) if codec else None,
        preprocessors=[plugin(p) for p in preprocessors or []],
        postprocessors=[plugin(p) for p in postprocessors or []],
    )
    signals = breaker if breaker is not None else []
    ctx = ConnectorContext(
        alias=alias,
        flow_id="test",
        kind=kind,
        config=config,
        spec=spec,
        logger=logging.getLogger(f"test.{alias}"),
        state_dir=state_dir,
        spu_addr=spu_addr,
        outputs=outputs,
        inputs=inputs,
        open_breaker=lambda reason: signals.append(f"open:{reason}"),
        close_breaker=lambda: signals.append("close"),
        stop_runtime=stop_runtime,
    )
    return cls(ctx)


def run(coro: Coroutine[Any, Any, T], timeout: float = 20.0) -> T:
    """Run one async test body with an overall timeout."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def sink_event(
    value: Any,
    meta: dict[str, Any] | None = None,
    *,
    port: str = "in",
    frames: list[bytes] | None = None,
    offset: int = -1,
) -> SinkEvent:
    """An event as the runtime hands it to a sink: channel bytes plus json-encoded, newline-separated frames."""
    raw = orjson.dumps(value)
    return SinkEvent(raw, meta or {}, frames if frames is not None else [raw + b"\n"], port, offset)


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout: float = 5.0) -> None:
    """Wait until `check()` holds, polling with sleeps (for effects in another task or process)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


async def frames_by_stream(conn: Connector, until: int) -> dict[int, list[bytes]]:
    """Pull, framing each stream with its own `separate` chain as the runtime does, until `until` frames."""
    chains: dict[int, Any] = {}
    out: dict[int, list[bytes]] = {}
    total = 0
    while total < until:
        item = await conn.pull()
        assert item is not None
        chain = chains.setdefault(item.stream, preprocessors(["separate"]))
        frames = chain.finish() if item.end_stream else chain.process(item.data or b"")
        out.setdefault(item.stream, []).extend(frames)
        total += len(frames)
    return out
