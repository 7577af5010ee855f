"""Control values: what flows against the data, from the runtime to Spark's processes.

Events flow with the data through channel topics (`contraflow.events`); the
signals that steer them flow the other way. Spark runs the sources and the
pipelines in processes that share no memory with the runtime, so the runtime
publishes those signals as named JSON values on the SPU (`CONTROL_SET` /
`CONTROL_GET`, kept by `contraflow.spu.storage.control`) and the other
processes read them. Every control value is named and shaped here, and the
runtime, the Spark source, the pipeline workers and the tests all go through
a `ControlValue`, so a name or a value's shape cannot drift between writer
and reader:

- `credit(consumer, topic)`: records the consumer's next micro-batch may read
  from `topic` (0 stops it; None, the default, is no limit);
- `signals(pipeline)`: `{node path: signal}` for the `qos::*` operators of
  the pipeline query named `pipeline` (`{flow}.{alias}`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
Signals = dict[str, dict[str, Any]]


class Controls(Protocol):
    """What `SpuClient` offers for control values."""

    def set_control(self, name: str, value: Any) -> None: ...

    def get_control(self, name: str) -> Any: ...


class AsyncControls(Protocol):
    """What `AsyncSpuClient` offers for control values."""

    def set_control(self, name: str, value: Any) -> Awaitable[None]: ...

    def get_control(self, name: str) -> Awaitable[Any]: ...


@dataclass(frozen=True)
class ControlValue(Generic[T]):
    """One named control value and how its value travels as JSON."""

    name: str
    encode: Callable[[T], Any]
    decode: Callable[[Any], T]

    def set(self, spu: Controls, value: T) -> None:
        spu.set_control(self.name, self.encode(value))

    def get(self, spu: Controls) -> T:
        return self.decode(spu.get_control(self.name))

    async def set_async(self, spu: AsyncControls, value: T) -> None:
        await spu.set_control(self.name, self.encode(value))

    async def get_async(self, spu: AsyncControls) -> T:
        return self.decode(await spu.get_control(self.name))


def _encode_credit(credit: int | None) -> int | None:
    return None if credit is None else max(0, int(credit))


def _decode_credit(value: Any) -> int | None:
    return None if value is None else int(value)


def credit(consumer: str, topic: str) -> ControlValue[int | None]:
    """The back-pressure credit of `consumer` reading `topic`: records per micro-batch, None unlimited."""
    return ControlValue(f"credit/{consumer}/{topic}", _encode_credit, _decode_credit)


def _encode_signals(signals: Signals) -> Signals:
    return {path: dict(signal) for path, signal in signals.items()}


def _decode_signals(value: Any) -> Signals:
    return dict(value or {})


def signals(pipeline: str) -> ControlValue[Signals]:
    """The QoS signals of the pipeline query `pipeline`: {node path: signal}, replaced as a whole."""
    return ControlValue(f"signals/{pipeline}", _encode_signals, _decode_signals)
