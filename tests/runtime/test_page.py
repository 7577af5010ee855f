"""The live flow page in a real headless Chromium (Debian's `chromium`, installed by `make test`).

The runtime runs the bundled `classify` example (its output directory first
blocked by a file, so its file sinks cannot connect and their breakers are
open) next to a metronome flow delivering to a real HTTP server. The page
must draw both graphs, show counters moving, turn a node red when its breaker
opens and back when it closes, and pause a flow with its button.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, async_playwright

from contraflow.api.app import create_app
from contraflow.api.server import ApiServer
from tests.runtime.harness import flow_id, running, troy
from tests.runtime.http_target import Target
from tests.runtime.test_contraflow import free_port, http_sink

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "classify"
BREAKER_RED = "rgb(214, 69, 65)"  # --open in page.css
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    path = shutil.which("chromium")
    assert path, "Debian's chromium is missing: `make test` installs it (apt-get install -y chromium)"
    return path


def classify_example(tmp_path: Path) -> str:
    """The bundled example as shipped, reading its own sample data and writing under `tmp_path`."""
    source = (EXAMPLE / "flow.troy").read_text()
    source = source.replace('"examples/classify/data/events.jsonl"', f'"{EXAMPLE / "data" / "events.jsonl"}"')
    return source.replace('"examples/classify/out"', f'"{tmp_path / "out"}"')


async def node(page: Page, flow: str, alias: str) -> dict[str, Any]:
    """A node of a flow's graph as drawn: its breaker, status and the colour of its outline."""
    found: dict[str, Any] | None = await page.evaluate(
        """([flow, alias]) => {
            const g = document.querySelector(`.flow[data-flow="${flow}"] g.node[data-node="${alias}"]`);
            if (!g) return null;
            return {breaker: g.dataset.breaker, status: g.dataset.status,
                    stroke: getComputedStyle(g.querySelector("rect")).stroke,
                    label: g.textContent};
        }""",
        [flow, alias],
    )
    assert found is not None, f"no node {alias} in flow {flow}"
    return found


async def edges(page: Page, flow: str) -> dict[tuple[str, str], int]:
    """(channel, reader) -> events appended, as the page labels its edges."""
    drawn = await page.evaluate(
        """(flow) => [...document.querySelectorAll(`.flow[data-flow="${flow}"] g.edge`)].map(
            (g) => [g.dataset.channel, g.dataset.to, Number(g.dataset.appended)])""",
        flow,
    )
    return {(channel, to): appended for channel, to, appended in drawn}


async def until(page: Page, check: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await page.wait_for_timeout(200)


def test_the_page_draws_flows_live_and_pauses_them(spark: Any, spu_addr: str, tmp_path: Path) -> None:
    target = Target()
    target.port = free_port()
    target.start()
    (tmp_path / "out").write_text("a file where the example's output directory should be")
    ticks = flow_id("page")
    metronome = troy(
        ticks,
        f"""
  define connector ticks from metronome with config = {{"interval": 20000000}} end;
  create connector ticks;
  {http_sink(target.url)}
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/sink;
""",
    )

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", classify_example(tmp_path)) as runtime:
            await runtime.deploy(metronome, "<page test>")
            server = ApiServer(create_app(runtime), "127.0.0.1", 0)
            base = f"http://{await server.start()}"
            try:
                async with async_playwright() as driver, httpx.AsyncClient(base_url=base) as api:
                    browser = await driver.chromium.launch_persistent_context(
                        str(tmp_path / "chromium-profile"),
                        executable_path=chromium(),
                        headless=True,
                        args=CHROMIUM_ARGS,
                        viewport={"width": 1400, "height": 900},
                    )
                    page = await browser.new_page()
                    await page.goto(base)
                    await check_page(page, api, ticks, target, tmp_path)
                    # `CONTRAFLOW_PAGE_SCREENSHOT=docs/operations-page.png` refreshes the picture in the docs.
                    shot = os.environ.get("CONTRAFLOW_PAGE_SCREENSHOT", str(tmp_path / "page.png"))
                    await page.screenshot(path=shot, full_page=True)
                    await browser.close()
            finally:
                await server.stop()

    try:
        asyncio.run(scenario())
    finally:
        target.stop()


async def check_page(page: Page, api: httpx.AsyncClient, ticks: str, target: Target, tmp_path: Path) -> None:
    # The bundled example's graph: every connector and pipeline, every channel as an edge.
    await page.wait_for_selector('.flow[data-flow="classify"] g.node[data-node="classified"]')
    for alias in ("events", "classify", "classified", "counts", "errors"):
        await node(page, "classify", alias)
    assert set(await edges(page, "classify")) == {
        ("events/out", "pipeline/classify"),
        ("classify/out", "connector/classified"),
        ("classify/counts", "connector/counts"),
        ("classify/err", "connector/errors"),
    }
    # Its file sinks cannot open their files: their breakers are open and drawn red.
    classified = await node(page, "classify", "classified")
    assert classified["breaker"] == "open" and classified["stroke"] == BREAKER_RED, classified
    assert (await edges(page, "classify"))[("events/out", "pipeline/classify")] == 0

    # Unblock the output directory: the sinks connect, the nodes turn, the events flow.
    (tmp_path / "out").unlink()

    async def example_ran() -> bool:
        drawn = await node(page, "classify", "classified")
        appended = (await edges(page, "classify"))[("events/out", "pipeline/classify")]
        return drawn["breaker"] == "closed" and drawn["stroke"] != BREAKER_RED and appended == 60

    await until(page, example_ran, "the example's breakers to close and its 60 events to flow")

    # The metronome flow: its counter moves while events flow.
    await page.wait_for_selector(f'.flow[data-flow="{ticks}"] g.edge')
    first = (await edges(page, ticks))[("ticks/out", "pipeline/pass")]

    async def moved() -> bool:
        return (await edges(page, ticks))[("ticks/out", "pipeline/pass")] > first + 10

    await until(page, moved, "the ticks counter to move")

    # Its HTTP server goes away: the sink's breaker opens and the node turns red; back again when it returns.
    target.stop()

    async def sink_is(state: str) -> bool:
        drawn = await node(page, ticks, "sink")
        return drawn["breaker"] == state and (drawn["stroke"] == BREAKER_RED) == (state == "open")

    await until(page, lambda: sink_is("open"), "the sink's node to show its open breaker")
    assert "breaker open" in (await node(page, ticks, "sink"))["label"]
    assert await page.locator("#events li[data-kind=breaker]").count() > 0  # the recent events list
    target.start()
    await until(page, lambda: sink_is("closed"), "the sink's node to show its breaker closed")

    # The pause button pauses the flow (as the API says), the resume button resumes it.
    card = page.locator(f'.flow[data-flow="{ticks}"]')
    await card.locator("button[data-action=pause]").click()
    await wait_for_status(api, ticks, "paused")
    await until(page, lambda: _has_status(page, ticks, "paused"), "the card to show paused")
    await card.locator("button[data-action=resume]").click()
    await wait_for_status(api, ticks, "running")
    assert (await api.get("/v1/flows/classify")).json()["status"] == "running"


async def _has_status(page: Page, flow: str, status: str) -> bool:
    return bool(await page.locator(f'.flow[data-flow="{flow}"][data-status="{status}"]').count())


async def wait_for_status(api: httpx.AsyncClient, flow: str, status: str, timeout_s: float = 10.0) -> None:
    """Poll the API (not the page) until the flow reports `status`."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (await api.get(f"/v1/flows/{flow}")).json()["status"] != status:
        assert asyncio.get_running_loop().time() < deadline, f"flow {flow} never became {status}"
        await asyncio.sleep(0.1)
