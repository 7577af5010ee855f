"""`cidr|...|`: IP addresses and networks, optionally only inside given IPv4 ranges.

`cidr||` matches any IP address or network (`10.0.0.0/8`; host bits must be
zero) and yields `{"prefix": [...], "mask": [...]}`: four octets for IPv4,
eight 16-bit groups for IPv6. `cidr|10.22.0.0/24, 10.21.1.0/24|` matches an
IPv4 address inside one of the ranges and yields the address's prefix and mask.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from contraflow.lang.script.extractors.text import of_text
from contraflow.lang.script.values import MISSING

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _groups(packed: bytes, width: int) -> list[int]:
    return [int.from_bytes(packed[i : i + width], "big") for i in range(0, len(packed), width)]


def _describe(network: Network) -> dict[str, list[int]]:
    width = 1 if network.version == 4 else 2
    return {
        "prefix": _groups(network.network_address.packed, width),
        "mask": _groups(network.netmask.packed, width),
    }


def _ranges(text: str) -> list[ipaddress.IPv4Network]:
    ranges = []
    for rule in (r.strip() for r in text.split(",")):
        if not rule:
            continue
        network = ipaddress.ip_network(rule)  # ValueError for a malformed rule: a compile error
        if not isinstance(network, ipaddress.IPv4Network):
            raise ValueError(f"IPv6 CIDR not supported as a range: '{rule}'")
        ranges.append(network)
    return ranges


def build(text: str) -> Any:
    ranges = _ranges(text)

    def extract(value: str) -> Any:
        if not ranges:
            try:
                return _describe(ipaddress.ip_network(value))
            except ValueError:
                return MISSING
        try:
            address = ipaddress.IPv4Address(value)
        except ValueError:
            return MISSING
        if any(address in network for network in ranges):
            return _describe(ipaddress.ip_network(address))
        return MISSING

    return of_text(extract)
