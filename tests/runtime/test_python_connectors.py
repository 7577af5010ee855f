"""Connector kinds written in Python: from an installed package's entry point and from `config.class`.

The plugin code (`python_connectors_plugin.py`) is copied into a real
distribution with its own entry point metadata on sys.path, and next to a
flow file; the runtime finds both the way a user's would be found.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contraflow.connectors import (
    ENTRY_POINT_GROUP,
    ConnectionLost,
    Connector,
    ConnectorConfigError,
    ConnectorContext,
    check_connector,
    connector_for,
    plugins_refused,
)
from contraflow.lang.errors import LangError, LangErrors
from contraflow.lang.graph import ConnectorSpec
from contraflow.lang.troy.compiler import compile_file
from contraflow.runtime.runtime import Runtime
from tests.connectors.support import sink_event
from tests.runtime.harness import flow_id, wait_for

PLUGIN = Path(__file__).with_name("python_connectors_plugin.py")
PACKAGE = "cfplug_demo"  # the installed distribution's package
COUNTER_KIND, COLLECTOR_KIND = "demo_counter", "demo_collector"
NEXT_TO_FLOW = "pyconn_user"  # the module next to the flow file


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A distribution declaring two kinds by entry point, on sys.path as an installed package is."""
    site = tmp_path_factory.mktemp("site")
    (site / PACKAGE).mkdir()
    (site / PACKAGE / "__init__.py").write_text(PLUGIN.read_text())
    info = site / f"{PACKAGE}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{COUNTER_KIND} = {PACKAGE}:Counter\n{COLLECTOR_KIND} = {PACKAGE}:Collector\n"
    )
    sys.path.insert(0, str(site))
    try:
        yield site
    finally:
        sys.path.remove(str(site))


def flow_file(directory: Path, fid: str, module: str) -> Path:
    """Two sources (one per way of naming a kind) into `pass`, out to two sinks (likewise)."""
    retry = '{"retry": {"interval_ms": 50, "growth_rate": 1, "max_retries": 100000}}'
    path = directory / "flow.troy"
    path.write_text(f"""
define flow {fid}
flow
  define connector counter_ep from {COUNTER_KIND}
  with codec = "json", preprocessors = ["separate"], config = {{"count": 6, "first": 3}} end;
  define connector counter_py from python
  with codec = "json", preprocessors = ["separate"],
       config = {{"class": "{module}:Counter", "count": 6, "first": 3}}
  end;
  define connector collector_py from python
  with codec = "json", postprocessors = ["separate"], config = {{"class": "{module}:Collector"}},
       reconnect = {retry}
  end;
  define connector collector_ep from {COLLECTOR_KIND}
  with codec = "json", config = {{"fail_first": true}} end;
  define pipeline pass pipeline select event from in into out; end;
  create connector counter_ep; create connector counter_py;
  create connector collector_py; create connector collector_ep;
  create pipeline pass;
  connect /connector/counter_ep to /pipeline/pass;
  connect /connector/counter_py to /pipeline/pass;
  connect /pipeline/pass to /connector/collector_py;
  connect /pipeline/pass to /connector/collector_ep;
end;
deploy flow {fid};
""")
    return path


def test_python_sources_and_sinks_get_acks_retries_a_breaker_and_pauses(
    installed: Path, spark: Any, spu_addr: str, tmp_path: Path
) -> None:
    flow_dir = tmp_path / "flow"
    flow_dir.mkdir()
    (flow_dir / f"{NEXT_TO_FLOW}.py").write_text(PLUGIN.read_text())
    fid = flow_id("pyconn")
    deployment = compile_file(flow_file(flow_dir, fid, NEXT_TO_FLOW))

    async def scenario() -> None:
        runtime = Runtime(spu_addr, spark, tmp_path / "data")
        await runtime.deploy_graphs(deployment)
        try:
            flow = runtime.flows[fid]
            ends: dict[str, Any] = {a: i.connector for a, i in flow.connectors.items()}
            sources = [ends["counter_ep"], ends["counter_py"]]
            sinks = [ends["collector_py"], ends["collector_ep"]]
            assert type(ends["counter_ep"]).__module__ == PACKAGE, "the kind came from the entry point"
            assert type(ends["collector_py"]).__module__ == NEXT_TO_FLOW, "the class from next to the flow"
            assert all(isinstance(c, Connector) for c in ends.values())
            assert ends["counter_py"].ctx.config == {"count": 6, "first": 3}, "`class` is not the class's"

            await wait_for(lambda: all(len(s.received) == 6 for s in sinks), what="the first events")
            await wait_for(lambda: all(s.acked == [0, 1, 2] for s in sources), what="acks, in pull order")

            await runtime.set_connector_status(fid, "counter_py", "paused")  # its pull under way ends
            ends["collector_py"].down = True  # its destination goes away, then the rest is pulled
            for source in sources:
                source.more.set()
            await wait_for(
                lambda: "connection lost" in flow.breakers.get("collector_py", ""), what="the breaker to open"
            )
            assert any(
                "breaker open: collector_py" in why for why in flow.connectors["counter_ep"].gate.reasons
            )
            assert all(s.acked == [0, 1, 2] for s in sources), "acked before every sink delivered"

            ends["collector_py"].down = False  # it reconnects; the batch it lost is sent again
            await wait_for(lambda: "collector_py" not in flow.breakers, what="the breaker to close")
            await wait_for(lambda: all(len(s.received) == 10 for s in sinks), what="all but the paused")
            assert ends["counter_py"].pulled == 4, "pulled while paused"
            await runtime.set_connector_status(fid, "counter_py", "running")
            await wait_for(lambda: all(len(s.received) == 12 for s in sinks), what="every event")
            await wait_for(lambda: all(s.acked == list(range(6)) for s in sources), what="the last acks")
        finally:
            await runtime.quiesce_all(shutdown=False)

        expected = sorted((src, n) for src in ("counter_ep", "counter_py") for n in range(6))
        for sink in sinks:
            assert sorted((v["from"], v["n"]) for v, _ in sink.received) == expected, "lost or doubled"
        framed = ends["collector_py"].received[0]
        assert framed[1].endswith(b"}\n"), "the separate postprocessor framed the json codec's bytes"
        assert ends["collector_py"].connects >= 2, "reconnected after ConnectionLost"
        assert ends["collector_ep"].failures_left == 0, "the retryable failure was retried, nothing lost"
        assert all(s.failed == [] for s in sources)
        assert flow.connectors["counter_py"].ctx.metrics.by_port["out"][0] == 6

    asyncio.run(scenario())


def test_a_missing_module_or_class_is_reported_at_the_class_value(tmp_path: Path) -> None:
    (tmp_path / "pyconn_errs.py").write_text(PLUGIN.read_text())
    cases = {
        "nomod": ('{"class": "pyconn_nowhere:Sink"}', "module 'pyconn_nowhere' not found"),
        "noclass": ('{"class": "pyconn_errs:Nope"}', "module 'pyconn_errs' (" + str(tmp_path)),
        "notconn": ('{"class": "pyconn_errs:NotAConnector"}', "is not a subclass of contraflow.connectors"),
        "badkey": (
            '{"class": "pyconn_errs:Collector", "fail_frist": true}',
            "unknown config key 'fail_frist'",
        ),
        "crashes": ('{"class": "pyconn_errs:CheckCrashes"}', "its check_config failed: ValueError: boom"),
        "noref": ('{"label": 1}', "missing config key 'class'"),
    }
    body = "".join(
        f"  define connector {name} from python with config = {config} end;\n  create connector {name};\n"
        for name, (config, _) in cases.items()
    )
    path = tmp_path / "errs.troy"
    text = f"define flow f\nflow\n{body}end;\ndeploy flow f;\n"
    path.write_text(text)
    with pytest.raises(LangErrors) as raised:
        compile_file(path)
    errors = {e.message.split("'")[1]: e for e in raised.value.errors}
    assert set(errors) == set(cases)
    lines = text.splitlines()
    for name, (config, message) in cases.items():
        err = errors[name]
        assert message in err.message, err.message
        line = next(i for i, t in enumerate(lines, 1) if f"connector {name} from" in t)
        # the `class` value, the bad key, or (no key to point at) the whole `config` record
        culprit = (
            '"fail_frist"' if name == "badkey" else config if name in ("noref", "crashes") else config[10:-1]
        )
        assert (err.position.line, err.position.column) == (line, lines[line - 1].index(culprit) + 1), name
    assert "did you mean 'fail_first'" in str(errors["badkey"].hint)
    assert 'add `"class": ...`' in errors["noref"].hint


def test_modules_are_found_next_to_the_flow_first_then_on_contraflow_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, elsewhere = tmp_path / "flow", tmp_path / "lib"
    here.mkdir()
    elsewhere.mkdir()
    plugin = PLUGIN.read_text()
    (here / "pyconn_shadowed.py").write_text(
        plugin + "\nfrom pyconn_neighbour import Base\n\nclass HereOnly(Base, Collector):\n    pass\n"
    )
    (here / "pyconn_neighbour.py").write_text("class Base:\n    pass\n")
    (here / "colorsys.py").write_text("raise ImportError('a file next to a flow shadowed the stdlib')\n")
    (elsewhere / "pyconn_shadowed.py").write_text(plugin)
    (elsewhere / "pyconn_libonly.py").write_text(plugin)
    monkeypatch.setenv("CONTRAFLOW_PATH", str(elsewhere))
    path = here / "f.troy"
    path.write_text(
        "define flow f\nflow\n"
        '  define connector a from python with config = {"class": "pyconn_shadowed:HereOnly"} end;\n'
        '  define connector b from python with config = {"class": "pyconn_libonly:Collector"} end;\n'
        "  create connector a; create connector b;\nend;\ndeploy flow f;\n"
    )
    specs = compile_file(path).flows["f"].connectors
    assert specs["a"].directory == str(here.resolve())
    assert sys.modules["pyconn_shadowed"].__file__ == str(here.resolve() / "pyconn_shadowed.py")
    assert sys.modules["pyconn_libonly"].__file__ == str(elsewhere.resolve() / "pyconn_libonly.py")
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)  # imported afresh (restored after the test)
    colorsys = importlib.import_module("colorsys")  # what the runtime imports later: Python's own

    assert Path(str(colorsys.__file__)).parent != here.resolve()


def test_an_installed_kind_is_a_troy_kind_and_a_broken_one_is_reported(installed: Path) -> None:
    from contraflow.lang.troy.kinds import CONNECTORS

    assert COUNTER_KIND in CONNECTORS and COLLECTOR_KIND in list(CONNECTORS)
    broken = installed / "cfplug_broken-0.1.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: cfplug_broken\nVersion: 0.1\n")
    (broken / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ndemo_broken = cfplug_absent:Thing\n")
    path = installed / "broken.troy"
    path.write_text(
        "define flow f\nflow\n  define connector b from demo_broken;\n  create connector b;\nend;\ndeploy flow f;\n"
    )
    with pytest.raises(LangError) as raised:
        compile_file(path)
    assert (
        "entry point 'demo_broken = cfplug_absent:Thing' failed: ModuleNotFoundError" in raised.value.message
    )
    assert (raised.value.position.line, raised.value.position.column) == (3, 20)


def test_the_example_sink_resolves_next_to_its_flow_and_writes_only_alerts(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "python"
    spec = compile_file(example / "flow.troy").flows["sensors"].connectors["alerts"]
    alerts = tmp_path / "out" / "alerts.jsonl"
    cls, config = connector_for(dataclasses.replace(spec, config={**spec.config, "path": str(alerts)}))
    check_connector(cls, spec.alias, config)
    assert cls.__module__ == "alert_file" and sys.modules["alert_file"].__file__ == str(
        example / "alert_file.py"
    )
    sink = cls(ConnectorContext(spec.alias, "t", spec.kind, config, spec, logging.getLogger("t")))
    blocked = cls(
        ConnectorContext(
            spec.alias, "t", spec.kind, {**config, "path": str(alerts / "x")}, spec, sink.ctx.logger
        )
    )

    async def scenario() -> None:
        await sink.connect()
        await sink.send([sink_event({"value": v}) for v in (49.5, 50.5, True, 91)])
        await sink.close()
        with pytest.raises(ConnectionLost):  # its directory is a file: the breaker's cause
            await blocked.connect()

    asyncio.run(scenario())
    assert alerts.read_bytes() == b'{"value":50.5}\n{"value":91}\n'


def test_refused_plugins_are_neither_imported_nor_used(installed: Path) -> None:
    """Inside `plugins_refused` (API deploys under a path policy) both ways of naming a kind fail."""
    loaded = ConnectorSpec("a", "a", COUNTER_KIND, {"count": 1})
    connector_for(loaded)  # registered from its entry point before the refusal
    with plugins_refused("not here"):
        for spec in (loaded, ConnectorSpec("b", "b", "python", {"class": "pyconn_never:Thing"})):
            with pytest.raises(ConnectorConfigError, match="refused here: not here"):
                connector_for(spec)
    assert "pyconn_never" not in sys.modules
