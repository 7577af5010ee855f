"""Holds every packet of a netfilter queue for a fixed time, then lets it through: the delay
`Network.delay` puts on a node's link (tests/faults/netns.py).

This kernel has no `netem` qdisc, nor `fq`/`etf` (which would honour a departure time a BPF
program sets), and nftables' own `queue` statement is not built in (CONFIG_NFT_QUEUE unset:
`nft add rule ... queue` answers "No such file or directory"). What is there: xtables' NFQUEUE
target, which `iptables` (the nft variant) adds through nftables' compat layer, and the
netfilter queue over netlink. The router's rule sends a link's packets to a queue; this
program, run in the router's namespace, reads each packet's id (metadata only, no payload)
and gives the verdict ACCEPT once the delay has passed, in arrival order. On SIGTERM it lets
every held packet through at once and exits (the caller removes the rule first).

Run: python delay.py QUEUE SECONDS (prints "ready" once bound: packets queued with no reader
would be dropped).
"""

from __future__ import annotations

import collections
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
SUBSYS_QUEUE = 3 << 8
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = 0, 1, 2
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN = 1, 2, 3
CMD_BIND = 1
COPY_META = 1
ATTR_PACKET_HDR, ATTR_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
SO_RCVBUFFORCE = 33  # root may set a buffer past rmem_max
IDLE_S = 0.1  # the longest wait between looks at SIGTERM
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port


def message(kind: int, queue: int, attributes: list[tuple[int, bytes]], flags: int = NLM_F_REQUEST) -> bytes:
    """A netfilter-queue netlink message: nfgenmsg (family, version, queue number), then
    attributes (length, type, value padded to 4 bytes)."""
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue)
    for kind_of, value in attributes:
        attribute = struct.pack("=HH", 4 + len(value), kind_of) + value
        body += attribute + b"\0" * (-len(attribute) % 4)
    return HEADER.pack(HEADER.size + len(body), SUBSYS_QUEUE | kind, flags, 0, 0) + body


def packet_ids(data: bytes) -> list[int]:
    """The ids of the queued packets a datagram from the kernel announces."""
    ids, at = [], 0
    while at + HEADER.size <= len(data):
        length, kind, _, _, _ = HEADER.unpack_from(data, at)
        if kind == SUBSYS_QUEUE | MSG_PACKET:
            ids.append(_packet_id(data[at + HEADER.size + 4 : at + length]))
        at += (length + 3) & ~3
    return ids


def _packet_id(attributes: bytes) -> int:
    at = 0
    while at + 4 <= len(attributes):
        length, kind = struct.unpack_from("=HH", attributes, at)
        if kind & 0x7FFF == ATTR_PACKET_HDR:
            return int(struct.unpack_from("!I", attributes, at + 4)[0])
        at += (length + 3) & ~3
    raise ValueError("a queued packet without its header")


def bind(queue: int) -> socket.socket:
    """A netlink socket reading `queue`, packets announced by metadata only."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)  # a lost notice would strand a packet
    sock.bind((0, 0))
    for attributes in (
        [(CFG_CMD, struct.pack("!BBH", CMD_BIND, 0, 0))],
        [(CFG_PARAMS, struct.pack("!IB", 0, COPY_META))],
        [(CFG_QUEUE_MAXLEN, struct.pack("!I", 65536))],
    ):
        sock.send(message(MSG_CONFIG, queue, attributes, NLM_F_REQUEST | NLM_F_ACK))
        _expect_ack(sock.recv(4096))
    return sock


def _expect_ack(data: bytes) -> None:
    error = struct.unpack_from("=i", data, HEADER.size)[0]  # NLMSG_ERROR: 0 acknowledges
    if error:
        raise OSError(-error, f"netfilter queue: {error}")


def hold(queue: int, delay_s: float) -> None:
    """Let each packet of `queue` through `delay_s` after it arrived, until SIGTERM."""
    sock = bind(queue)
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    held: collections.deque[tuple[float, int]] = collections.deque()
    print("ready", flush=True)
    while not stopping:
        wait = min(IDLE_S, max(0.0, held[0][0] - time.monotonic())) if held else IDLE_S
        if select.select([sock], [], [], wait)[0]:
            due = time.monotonic() + delay_s
            held.extend((due, packet) for packet in packet_ids(sock.recv(1 << 16)))
        while held and held[0][0] <= time.monotonic():
            accept(sock, queue, held.popleft()[1])
    for _, packet in held:
        accept(sock, queue, packet)


def accept(sock: socket.socket, queue: int, packet: int) -> None:
    verdict = struct.pack("!II", NF_ACCEPT, packet)
    sock.send(message(MSG_VERDICT, queue, [(ATTR_VERDICT_HDR, verdict)]))


if __name__ == "__main__":
    hold(int(sys.argv[1]), float(sys.argv[2]))
