"""The source's offset commit outlasts an SPU that does not answer for longer than a request.

A pipeline's source commits its consumer offsets after each micro-batch; a partition between
the runtime and the SPU longer than the client's request timeout used to fail that commit and
so the query (issue 32). Here a real SPU process is SIGSTOPped (its connections stay open, no
answer comes) and the client's request timeout is short, so the stop outlasts many requests.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import pytest

from contraflow.spark.commit_retry import commit_offsets_retrying
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.rpc.client import RetryPolicy
from tests.spu.cluster_harness import wait_for
from tests.spu.spu_harness import spu_process

REQUEST_TIMEOUT_S = 0.2


def test_an_offset_commit_retries_through_an_spu_that_stopped_answering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "contraflow.spark.commit_retry")
    with spu_process(tmp_path) as (proc, addr):
        client = SpuClient(addr, request_timeout_s=REQUEST_TIMEOUT_S, retry=RetryPolicy(attempts=1))
        try:
            client.create_topic("t")
            client.produce("t", 0, [b"%d" % i for i in range(10)])  # offsets are within the log
            client.commit_offset("c", "t", 0, 3)
            proc.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(SpuError) as alone:  # the client alone gives up
                    client.commit_offset("c", "t", 0, 7)
                assert alone.value.code is ErrorCode.TIMEOUT
                failed: list[BaseException] = []

                def commit() -> None:
                    try:
                        commit_offsets_retrying(client, "c", "t", {0: 7}, 60.0)
                    except BaseException as err:  # reported by the assertion below
                        failed.append(err)

                committing = threading.Thread(target=commit)
                committing.start()
                wait_for("two retries logged", lambda: len(caplog.records) >= 2 or not committing.is_alive())
            finally:
                proc.send_signal(signal.SIGCONT)
            committing.join(60.0)
            assert not committing.is_alive() and failed == []
            assert client.fetch_offset("c", "t", 0) == 7
            retries = [r.getMessage() for r in caplog.records]
            assert all("offset 7 of t/0 for c" in r and "retrying" in r for r in retries), retries
            assert any("no answer" in r or "timed out" in r.lower() for r in retries), retries
        finally:
            client.close()
