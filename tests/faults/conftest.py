"""A failed partition scenario shows the last lines of every cluster process's log with its report:
why a replica did not rejoin is in there, and the cluster is gone by the time anyone looks."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests.spu.cluster_harness import log_tails


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    setting = getattr(item, "funcargs", {}).get("setting")
    if report.failed and call.when == "call" and setting is not None:
        report.sections.append(("cluster logs", log_tails(setting.cluster.root)))
    return report
