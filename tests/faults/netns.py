"""Several hosts on one machine: each node in a Linux network namespace of its own, all joined
through a router namespace, where any direction between two nodes can be cut and healed.

Every node has one address (10.77.0.N/32 on its loopback) and one link to the router
(10.78.N.2 on its side, 10.78.N.1 on the router's); the router forwards between them. A cut
direction is an `ip rule ... blackhole` on the router: what the one node sends the other is
dropped silently in the middle of the network, as by a dead switch port or a firewall, so both
ends' TCP keeps retransmitting (ever more slowly) and both processes stay alive. Healing
deletes the rule.

This kernel has no `netem`, so loss and delay are made on the router with netfilter instead:
loss by an nftables rule that drops a random share of a link's packets (`numgen random`),
delay by an `iptables` NFQUEUE rule that hands a link's packets to a program holding each one
for a fixed time (tests/faults/delay.py says why that way). Healing removes them too. Needs
root, iproute2 (`ip`), nftables (`nft`) and iptables: tests run as root, as CI does, and `make
unit` installs them when missing.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"  # node addresses
LINKS = "10.78"  # each node's link to the router: 10.78.N.0/30
ROUTER = "router"
FAULTS = "faults"  # the router's nftables table of losses
DELAY = Path(__file__).with_name("delay.py")
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class Network:
    """Nodes by name, all behind one router; `cut`, `isolate`, `split` and `heal` change what
    it forwards."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = list(nodes)
        assert ROUTER not in self.nodes, f"{ROUTER!r} names the router's namespace"
        self._tag = f"cf{os.getpid()}"  # namespaces are global: two test runs must not meet
        self._cut: set[tuple[str, str]] = set()
        self._lossy = False
        self._delays: dict[str, subprocess.Popen[str]] = {}
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- names -----------------------------------------------------------------------------------

    def namespace(self, node: str) -> str:
        return f"{self._tag}-{node}"

    def address(self, node: str) -> str:
        return f"{SUBNET}.{self.nodes.index(node) + 1}"

    def command(self, node: str, argv: list[str]) -> list[str]:
        """`argv` run inside `node`'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    # -- building and tearing down ---------------------------------------------------------------

    def _build(self) -> None:
        router = self.namespace(ROUTER)
        _ip("netns", "add", router)
        self._made.append(router)
        _run(["ip", "netns", "exec", router, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
        for n, node in enumerate(self.nodes, 1):
            ns = self.namespace(node)
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(node)}/32", "dev", "lo")
            _ip(
                "link", "add", "uplink", "netns", ns, "type", "veth", "peer", "name", f"n{n}", "netns", router
            )
            _ip("-n", ns, "addr", "add", f"{LINKS}.{n}.2/30", "dev", "uplink")
            _ip("-n", router, "addr", "add", f"{LINKS}.{n}.1/30", "dev", f"n{n}")
            _ip("-n", ns, "link", "set", "uplink", "up")
            _ip("-n", router, "link", "set", f"n{n}", "up")
            _ip(
                "-n", ns, "route", "add", f"{SUBNET}.0/24", "via", f"{LINKS}.{n}.1", "src", self.address(node)
            )
            _ip("-n", router, "route", "add", f"{self.address(node)}/32", "via", f"{LINKS}.{n}.2")

    def close(self) -> None:
        """Delete the namespaces (their links go with them)."""
        self._stop_delays()
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        self._made.clear()

    # -- faults ----------------------------------------------------------------------------------

    def cut(self, sender: str, receiver: str, *, both_ways: bool = True) -> None:
        """Drop what `sender` sends to `receiver` (and the reverse, unless one way)."""
        pairs = [(sender, receiver), (receiver, sender)] if both_ways else [(sender, receiver)]
        for a, b in pairs:
            if (a, b) not in self._cut:
                _ip("-n", self.namespace(ROUTER), "rule", "add", *self._rule(a, b))
                self._cut.add((a, b))

    def _rule(self, sender: str, receiver: str) -> list[str]:
        return ["from", self.address(sender), "to", self.address(receiver), "blackhole"]

    def split(self, side: Iterable[str], other: Iterable[str]) -> None:
        """Two sides that do not hear each other; each side stays whole."""
        others = list(other)
        for a in side:
            for b in others:
                self.cut(a, b)

    def isolate(self, node: str) -> None:
        self.split([node], [n for n in self.nodes if n != node])

    def lose(self, node: str, percent: int) -> None:
        """Drop `percent`% of the packets crossing `node`'s link, either way, each drawn on its own
        (a packet between two lossy nodes may be dropped at either)."""
        link = self._link(node)
        if not self._lossy:
            table = f"add table ip {FAULTS}\n"
            chain = f"add chain ip {FAULTS} forward {{ type filter hook forward priority 0; }}\n"
            self._nft(table + chain)
            self._lossy = True
        drop = f"numgen random mod 100 < {percent} drop"
        self._nft(
            f"add rule ip {FAULTS} forward iifname {link} {drop}\n"
            f"add rule ip {FAULTS} forward oifname {link} {drop}\n"
        )

    def delay(self, node: str, seconds: float) -> None:
        """Hold every packet crossing `node`'s link, either way, for `seconds` (its round trips
        grow by twice that; a packet between two delayed nodes waits once)."""
        assert node not in self._delays, f"{node} is delayed already"
        queue = self.nodes.index(node) + 1
        holder = subprocess.Popen(
            self.command(ROUTER, [sys.executable, str(DELAY), str(queue), str(seconds)]),
            stdout=subprocess.PIPE,
            text=True,
        )
        self._delays[node] = holder
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n", "the delay did not start"
        for way in ("-i", "-o"):
            self._iptables("-A", "FORWARD", way, self._link(node), "-j", "NFQUEUE", "--queue-num", str(queue))

    def heal(self) -> None:
        """Every link carries traffic again both ways, all of it and at once."""
        for a, b in sorted(self._cut):
            _ip("-n", self.namespace(ROUTER), "rule", "del", *self._rule(a, b))
        self._cut.clear()
        if self._lossy:
            self._nft(f"flush chain ip {FAULTS} forward\n")
        self._stop_delays()

    def _stop_delays(self) -> None:
        """Remove the delays' rules, then let their holders release what they hold and exit."""
        if self._delays:
            self._iptables("-F", "FORWARD")
        for holder in self._delays.values():
            holder.terminate()
            holder.wait(10)
        self._delays.clear()

    def _link(self, node: str) -> str:
        """The router's end of `node`'s link."""
        return f"n{self.nodes.index(node) + 1}"

    def _nft(self, script: str) -> None:
        _run(self.command(ROUTER, ["nft", "-f", "-"]), stdin=script)

    def _iptables(self, *args: str) -> None:
        _run(self.command(ROUTER, ["iptables", *args]))

    # -- being a node ----------------------------------------------------------------------------

    @contextmanager
    def inside(self, node: str) -> Iterator[None]:
        """Run the calling thread inside `node`'s namespace meanwhile: the sockets it opens, and
        the threads it starts (an `SpuClient`'s loop), belong to that node for good."""
        with (
            open("/proc/thread-self/ns/net") as home,
            open(f"/var/run/netns/{self.namespace(node)}") as target,
        ):
            _setns(target.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(argv: list[str], stdin: str | None = None) -> None:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
