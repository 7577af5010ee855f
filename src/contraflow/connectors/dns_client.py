"""`dns_client`: DNS lookups as events (Tremor's), on dnspython's asynchronous resolver.

A request is any event with `$dns.lookup`: a name (`"tremor.rs"`: its
addresses, A records, else AAAA) or `{"name", "type"}` (`"CNAME"`, `"MX"`,
`"TXT"`...). The reply on `out` is the list of answer records, each
`{<type>: <data as text>, "ttl": seconds}` (CNAMEs met on the way included,
as Tremor lists them), with the request's `$correlation`. A failed lookup
(no such name, no answer, no server answering within the resolver's
lifetime) is an event on `err`: `{"request": $dns, "error": text}` with
`$correlation`. The sink side acknowledges each request once answered.

Tremor's connector takes no config and asks the system's resolver
(/etc/resolv.conf); so does this one, and `nameservers` (a list of `"host"`
or `"host:port"`, contraflow's own key) names the servers to ask instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.rdatatype
import dns.resolver

from contraflow.connectors.base import Connector, ConnectorContext, SinkEvent, SourceData, register
from contraflow.connectors.base.inbox import Inbox
from contraflow.connectors.base.options import ConfigReader

DNS_PORT = 53
TYPES = frozenset(
    [
        "A",
        "AAAA",
        "ANAME",
        "CNAME",
        "TXT",
        "PTR",
        "CAA",
        "HINFO",
        "HTTPS",
        "MX",
        "NAPTR",
        "NULL",
        "NS",
        "OPENPGPKEY",
        "SOA",
        "SRV",
        "SSHFP",
        "SVCB",
        "TLSA",
    ]
)

Nameserver = tuple[str, int]


class DnsRequestError(Exception):
    """A request that is not a lookup (no `$dns.lookup`, an unknown record type)."""


def request_of(meta: Mapping[str, Any]) -> tuple[str, str | None]:
    """(name, record type or None for addresses) from `$dns.lookup`."""
    dns_meta = meta.get("dns")
    lookup = dns_meta.get("lookup") if isinstance(dns_meta, dict) else None
    if isinstance(lookup, str):
        return lookup, None
    if isinstance(lookup, dict) and isinstance(lookup.get("name"), str):
        kind = lookup.get("type")
        if kind is None:
            return lookup["name"], None
        if kind not in TYPES:
            raise DnsRequestError(f"Invalid or unsupported record type: {kind}")
        return lookup["name"], kind
    raise DnsRequestError("Invalid DNS request: Metadata `$dns.lookup` missing")


def records_of(answer: dns.resolver.Answer) -> list[dict[str, Any]]:
    """Every record of the answer section as `{type: text, "ttl": n}`."""
    records: list[dict[str, Any]] = []
    for rrset in answer.response.answer:
        kind = dns.rdatatype.to_text(rrset.rdtype)
        records.extend({kind: rdata.to_text(), "ttl": rrset.ttl} for rdata in rrset)
    return records


@register("dns_client")
class DnsClientConnector(Connector[list[Nameserver]]):
    config_keys = frozenset({"nameservers"})
    structured = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox(ctx.quiescing)
        self._resolver: dns.asyncresolver.Resolver | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> list[Nameserver]:
        servers = cfg.config.get("nameservers", [])
        if not isinstance(servers, list) or not all(isinstance(s, str) and s for s in servers):
            raise cfg.error("nameservers", f'must be a list of "host" or "host:port", got {servers!r}')
        parsed = []
        for server in servers:
            host, colon, port = server.rpartition(":")
            if not colon or "]" in port:  # no port (an IPv6 address alone has colons too)
                host, port = server, str(DNS_PORT)
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise cfg.error("nameservers", f"has an invalid port: {server!r}")
            parsed.append((host.strip("[]"), int(port)))
        return parsed

    async def connect(self) -> None:
        """Read the system's resolver configuration (or take the configured servers)."""
        if self._resolver is not None:
            return
        if self.options:
            resolver = dns.asyncresolver.Resolver(configure=False)
            resolver.nameservers = [host for host, _ in self.options]
            resolver.nameserver_ports = {host: port for host, port in self.options}
        else:
            resolver = await asyncio.to_thread(dns.asyncresolver.Resolver)
        self._resolver = resolver

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def send(self, events: Sequence[SinkEvent]) -> None:
        for event in events:
            port, reply = await self._lookup(event.meta)
            if port not in self.ctx.outputs:
                continue
            meta = {"correlation": event.meta["correlation"]} if "correlation" in event.meta else {}
            await self.inbox.put(SourceData(events=[(reply, meta)], port=port))

    async def _lookup(self, meta: Mapping[str, Any]) -> tuple[str, Any]:
        """("out", records) or ("err", {"request", "error"})."""
        assert self._resolver is not None, "dns_client: send before connect"
        try:
            name, kind = request_of(meta)
            if kind is not None:
                return "out", records_of(await self._resolver.resolve(name, kind))
            try:
                return "out", records_of(await self._resolver.resolve(name, "A"))
            except dns.resolver.NoAnswer:
                return "out", records_of(await self._resolver.resolve(name, "AAAA"))
        except (DnsRequestError, dns.exception.DNSException) as err:
            self.ctx.metrics.count("in", 0, 0, errors=1)
            return "err", {"request": meta.get("dns"), "error": str(err)}
