"""A sink commit refused for want of in-sync replicas waits for them instead of failing the query.

On a cluster a partition's leader refuses a commit with NOT_ENOUGH_REPLICAS,
before writing anything, while fewer replicas than the topic's
`min_in_sync_replicas` are in sync (a follower down or cut off). That is a
state the cluster leaves by itself once the follower is back, and the batch
is still staged, so failing the micro-batch (and so stopping the pipeline's
query) would turn a passing outage into a restart. The sink's commit retries
instead, waiting longer after each refusal (`contraflow.backoff`), for at most
`commitRetryTimeout` (sink option, default 5 minutes); each refusal is logged
as a warning naming the batch, the attempt and the wait, and the error raised
once the time is up says how long it tried. Meanwhile the micro-batch does not
finish, so the pipeline reads nothing more and its input channel fills until
back-pressure holds the flow's sources. Any other error is not retried here.

The source's offset commit (`commit_offsets_retrying`) is idempotent (storing the
same offsets again changes nothing), so it also retries whatever a passing outage
of the SPU raises: a timeout, a lost connection, a leader being elected. Before,
a partition between the runtime and an SPU longer than the client's 30 s request
timeout failed the commit and so the query, and the rest of the input never came out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from contraflow.backoff import backoff
from contraflow.spu.protocol.errors import REROUTE, RETRIABLE, ErrorCode, SpuError

if TYPE_CHECKING:
    from contraflow.spu.client import SpuClient

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_COMMIT_RETRY_S = 300.0
FIRST_WAIT_S = 0.1
MAX_WAIT_S = 5.0
# What an idempotent commit retries: whatever the cluster leaves by itself.
TRANSIENT = RETRIABLE | REROUTE | {ErrorCode.NOT_ENOUGH_REPLICAS}


@dataclass(frozen=True)
class Refusal:
    """One refused attempt: which, after how long, the wait before the next, the server's reason."""

    attempt: int
    elapsed_s: float
    wait_s: float
    message: str


def commit_retrying(
    commit: Callable[[], T],
    what: str,
    timeout_s: float = DEFAULT_COMMIT_RETRY_S,
    *,
    on_refusal: Callable[[Refusal], None] | None = None,
    retried: frozenset[ErrorCode] = frozenset({ErrorCode.NOT_ENOUGH_REPLICAS}),
) -> T:
    """`commit()`, again after each refusal with a code in `retried` until `timeout_s` has
    passed. `what` names the commit in the reports (e.g. `batch 7 of query q`); `on_refusal`
    also gets each refusal (the log always does)."""
    began = time.monotonic()
    waits = backoff(FIRST_WAIT_S, MAX_WAIT_S)
    attempt = 0
    while True:
        attempt += 1
        try:
            return commit()
        except SpuError as err:
            if err.code not in retried:
                raise
            elapsed = time.monotonic() - began
            wait = min(next(waits), max(0.0, timeout_s - elapsed))
            if wait <= 0:
                raise SpuError(
                    err.code,
                    f"commit of {what} refused {attempt} times over {elapsed:.1f}s "
                    f"(commitRetryTimeout {timeout_s:g}s): {err}",
                ) from err
            refusal = Refusal(attempt, elapsed, wait, str(err))
            log.warning(
                "commit of %s refused (attempt %d, %.1fs so far), retrying in %.2fs: %s",
                what,
                attempt,
                elapsed,
                wait,
                err,
            )
            if on_refusal is not None:
                on_refusal(refusal)
            time.sleep(wait)


def commit_offsets_retrying(
    client: SpuClient, consumer: str, topic: str, offsets: Mapping[int, int], timeout_s: float
) -> None:
    """Store `consumer`'s offsets of `topic` (partition -> offset), each retried through
    transient errors for up to `timeout_s`, each retry logged."""
    for partition, offset in offsets.items():
        commit_retrying(
            lambda: client.commit_offset(consumer, topic, partition, offset),  # noqa: B023 (called at once)
            f"offset {offset} of {topic}/{partition} for {consumer}",
            timeout_s,
            retried=TRANSIENT,
        )
