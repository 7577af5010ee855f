"""Channel topic and consumer names: one topic per (flow, producing node, output port).

Every edge of a flow graph is a topic on the SPU. The producer of an edge
(connector or pipeline) appends to `channel_topic(flow, alias, port)`; each
consumer reads it under its own consumer name `consumer_name(flow, alias, port)`,
so a fan-out edge shares one topic and the slowest reader sets the depth.

Names must fit the SPU's topic charset (`[A-Za-z0-9._-]`, at most 249
characters). Troy identifiers already fit; anything else (flow ids deployed
over the API may contain other characters) is escaped so that the mapping
stays one-to-one: `.` separates the parts, so it and `-` and every other
character outside `[A-Za-z0-9_]` become `-XX` (hex of each UTF-8 byte).
"""

from __future__ import annotations

import re

from contraflow.errors import UserError

MAX_NAME = 249
_PLAIN = re.compile(r"[A-Za-z0-9_]+")


class ChannelNameError(UserError):
    """A flow id, alias or port whose channel name cannot be a topic name (too long or empty)."""


def escape_part(part: str) -> str:
    """One name part in the topic charset, escaped so distinct parts never collide."""
    if not part:
        raise ChannelNameError("a flow id, alias or port name must not be empty")
    if _PLAIN.fullmatch(part):
        return part
    return "".join(c if _PLAIN.fullmatch(c) else "".join(f"-{b:02x}" for b in c.encode()) for c in part)


def _join(*parts: str) -> str:
    name = ".".join(escape_part(p) for p in parts)
    if len(name) > MAX_NAME:
        raise ChannelNameError(
            f"channel name {name[:40]}... is {len(name)} characters long (topics allow {MAX_NAME}): "
            "use shorter flow, connector or pipeline names"
        )
    return name


def channel_topic(flow_id: str, from_alias: str, from_port: str) -> str:
    """The topic events leaving `from_alias` on `from_port` are appended to, e.g. `main.events.out`."""
    return _join(flow_id, from_alias, from_port)


def consumer_name(flow_id: str, to_alias: str, to_port: str) -> str:
    """The consumer name `to_alias` reads its `to_port` input under, e.g. `main.out.in`."""
    return _join(flow_id, to_alias, to_port)


def flow_prefix(flow_id: str) -> str:
    """The common prefix of every channel topic of a flow instance (to list or delete them)."""
    return escape_part(flow_id) + "."
