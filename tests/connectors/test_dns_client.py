"""dns_client against a real DNS server on loopback (dnslib's), over UDP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dnslib.server import DNSLogger, DNSServer
from dnslib.zoneresolver import ZoneResolver

from contraflow.connectors.base import ConnectorConfigError
from tests.connectors.support import make, run, sink_event

ZONE = """
tremor.test.        60  IN A      10.0.0.1
tremor.test.        60  IN A      10.0.0.2
www.tremor.test.    120 IN CNAME  tremor.test.
v6.tremor.test.     30  IN AAAA   ::1
tremor.test.        300 IN MX     10 mail.tremor.test.
"""


@pytest.fixture(scope="module")
def dns_server() -> Iterator[str]:
    quiet = DNSLogger(logf=lambda _line: None)
    server = DNSServer(ZoneResolver(ZONE), address="127.0.0.1", port=0, logger=quiet)
    server.start_thread()
    try:
        yield f"127.0.0.1:{server.server.server_address[1]}"
    finally:
        server.stop()


def lookups(dns_server: str, requests: list[dict[str, Any]]) -> list[tuple[str, Any, dict[str, Any]]]:
    async def body() -> list[tuple[str, Any, dict[str, Any]]]:
        conn = make("dns_client", {"nameservers": [dns_server]})
        await conn.connect()
        await conn.send([sink_event(None, meta) for meta in requests])
        out = []
        for _ in requests:
            item = await conn.pull()
            assert item is not None and item.events is not None
            [(value, meta)] = item.events
            out.append((item.port, value, meta))
        return out

    return run(body())


def test_lookups_reply_with_tremors_records_and_the_correlation(dns_server: str) -> None:
    got = lookups(
        dns_server,
        [
            {"dns": {"lookup": "tremor.test"}, "correlation": "c1"},
            {"dns": {"lookup": {"name": "www.tremor.test", "type": "CNAME"}}},
            {"dns": {"lookup": {"name": "tremor.test", "type": "MX"}}},
            {"dns": {"lookup": {"name": "v6.tremor.test", "type": "AAAA"}}},
        ],
    )
    assert got[0] == (
        "out",
        [{"A": "10.0.0.1", "ttl": 60}, {"A": "10.0.0.2", "ttl": 60}],
        {"correlation": "c1"},
    )
    assert got[1] == ("out", [{"CNAME": "tremor.test.", "ttl": 120}], {})
    assert got[2] == ("out", [{"MX": "10 mail.tremor.test.", "ttl": 300}], {})
    assert got[3] == ("out", [{"AAAA": "::1", "ttl": 30}], {})


def test_failed_lookups_are_errors_on_err(dns_server: str) -> None:
    got = lookups(
        dns_server,
        [
            {"dns": {"lookup": "missing.tremor.test"}, "correlation": 2},
            {"dns": {"lookup": {"name": "tremor.test", "type": "BOGUS"}}},
            {"nodns": True},
        ],
    )
    assert [port for port, _, _ in got] == ["err", "err", "err"]
    assert got[0][1]["request"] == {"lookup": "missing.tremor.test"} and got[0][2] == {"correlation": 2}
    assert "Invalid or unsupported record type: BOGUS" in got[1][1]["error"]
    assert "`$dns.lookup` missing" in got[2][1]["error"]


def test_nameservers_must_have_valid_ports() -> None:
    with pytest.raises(ConnectorConfigError, match="config key 'nameservers' has an invalid port"):
        make("dns_client", {"nameservers": ["127.0.0.1:99999"]})
