"""QoS signals from the runtime to pipelines running in Spark's Python workers.

`qos::roundrobin`, `qos::backpressure` and `qos::percentile` route by state
the runtime computes from contraflow feedback (see `contraflow.pipeline.qos`).
The workers share no memory with the runtime, so the runtime publishes that
state as one SPU control value per pipeline query, `signals/{query name}` =
{node path: signal}, and a worker reads it before each batch it runs. Only
pipelines with a QoS node pay for the read.
"""

from __future__ import annotations

from typing import Any

_clients: dict[str, Any] = {}


def signals_name(pipeline: str) -> str:
    """The control value holding the signals of the pipeline query `pipeline`."""
    return f"signals/{pipeline}"


def publish_signals(spu: Any, pipeline: str, signals: dict[str, Any]) -> None:
    """Publish {node path: signal} for the pipeline query `pipeline` (replaces what was there)."""
    spu.set_control(signals_name(pipeline), signals)


def apply_signals(executor: Any, spu: str | None, pipeline: str) -> None:
    """Give `executor` exactly the signals last published for `pipeline`: a node the value leaves
    out loses what an earlier batch gave it (executors are reused across batches)."""
    if spu is None:
        return
    client = _clients.get(spu)
    if client is None:
        from contraflow.spu.client import SpuClient

        client = _clients[spu] = SpuClient(spu)
    executor.signals.clear()
    for node, signal in (client.get_control(signals_name(pipeline)) or {}).items():
        executor.signal(node, signal)
