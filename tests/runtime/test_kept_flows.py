"""Flows deployed through the API are kept in the data directory for the next start (issue 32);
tests/e2e/test_crash_restart.py shows one come back running after a SIGKILL."""

from __future__ import annotations

import asyncio
from pathlib import Path

from contraflow.runtime.kept_flows import KEPT_DIR, KeptFlows
from contraflow.runtime.runtime import Runtime


def test_kept_flows_are_listed_in_deploy_order_until_forgotten(tmp_path: Path) -> None:
    kept = KeptFlows(tmp_path)
    assert kept.all() == []
    kept.keep(["a", "b"], "source one", "one.troy", tmp_path / "here")
    kept.keep(["c"], "source two", "two.troy", tmp_path)
    (tmp_path / KEPT_DIR / "torn.json").write_bytes(b'{"flow": "torn", "sour')  # skipped, logged
    assert [(k.flow_id, k.source, k.name) for k in kept.all()] == [
        ("a", "source one", "one.troy"),
        ("b", "source one", "one.troy"),
        ("c", "source two", "two.troy"),
    ]
    assert kept.all()[0].directory == str(tmp_path / "here")
    kept.forget("b")
    kept.forget("never-kept")
    assert [k.flow_id for k in KeptFlows(tmp_path).all()] == ["a", "c"]


def test_a_kept_flow_that_no_longer_compiles_is_an_event_and_the_start_goes_on(
    spu_addr: str, tmp_path: Path
) -> None:
    KeptFlows(tmp_path).keep(["gone"], "define flow gone\nflow\n  bogus;\nend;\n", "old.troy", tmp_path)

    async def start() -> tuple[list[str], list[dict[str, object]]]:
        runtime = Runtime(spu_addr, None, tmp_path)
        redeployed = await runtime.redeploy_kept()
        failed = [e for e in runtime.events.recent if e["kind"] == "redeploy_failed"]
        await runtime.events.close()
        return redeployed, failed

    redeployed, [failed] = asyncio.run(start())
    assert redeployed == [] and failed["flow"] == "gone"
    assert str(failed["error"]).startswith("old.troy:3:")
