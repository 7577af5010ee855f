"""QoS signals from the runtime to pipelines running in Spark's Python workers.

`qos::roundrobin`, `qos::backpressure` and `qos::percentile` route by state
the runtime computes from contraflow feedback (see `contraflow.pipeline.qos`).
The workers share no memory with the runtime, so the runtime publishes that
state as one SPU control value per pipeline query (`contraflow.control.signals`:
{node path: signal}), and a worker reads it before each batch it runs. Only
pipelines with a QoS node pay for the read.
"""

from __future__ import annotations

from typing import Any

from contraflow import control

_clients: dict[str, Any] = {}


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
    for node, signal in control.signals(pipeline).get(client).items():
        executor.signal(node, signal)
