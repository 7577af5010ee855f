"""Several hosts on one machine: each node in a Linux network namespace of its own, each pair of
nodes joined by its own veth link, so any link can be cut (one way or both) and healed.

Every node has one address (10.77.0.N/32 on its loopback); a /32 route per peer sends the
peer's traffic down the link to it. Cutting a link direction replaces the sending end's queue
with a `pfifo` of length 0, which drops every packet silently, as a dead switch port or a
firewall does: a connection attempt hangs and an open connection stops hearing back, and
both processes stay alive. (This kernel has no `netem`, so delay and loss are not offered.)
Healing removes that queue. Needs root and iproute2 (`ip`, `tc`): tests run as root, as CI
does, and `make unit` installs iproute2 when it is missing.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


class Network:
    """Nodes by name, fully meshed; `cut`, `isolate`, `split` and `heal` change the links."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = list(nodes)
        self._tag = f"cf{os.getpid()}"  # namespaces are global: two test runs must not meet
        self._cut: set[tuple[str, str]] = set()
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

    def _device(self, node: str, peer: str) -> str:
        """The end of the node-peer link inside `node`'s namespace (names are per namespace)."""
        return f"to{self.nodes.index(peer)}"

    def command(self, node: str, argv: list[str]) -> list[str]:
        """`argv` run inside `node`'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    # -- building and tearing down ---------------------------------------------------------------

    def _build(self) -> None:
        for node in self.nodes:
            _ip("netns", "add", self.namespace(node))
            self._made.append(self.namespace(node))
            _ip("-n", self.namespace(node), "link", "set", "lo", "up")
            _ip("-n", self.namespace(node), "addr", "add", f"{self.address(node)}/32", "dev", "lo")
        for a, b in itertools.combinations(self.nodes, 2):
            dev_a, dev_b = self._device(a, b), self._device(b, a)
            ns_a, ns_b = self.namespace(a), self.namespace(b)
            _ip("link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
            for node, peer, dev in ((a, b, dev_a), (b, a, dev_b)):
                ns = self.namespace(node)
                _ip("-n", ns, "link", "set", dev, "up")
                _ip(
                    "-n",
                    ns,
                    "route",
                    "add",
                    f"{self.address(peer)}/32",
                    "dev",
                    dev,
                    "src",
                    self.address(node),
                )

    def close(self) -> None:
        """Delete the namespaces (their links go with them)."""
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
        self._made.clear()

    # -- faults ----------------------------------------------------------------------------------

    def cut(self, sender: str, receiver: str, *, both_ways: bool = True) -> None:
        """Drop what `sender` sends to `receiver` (and the reverse, unless one way)."""
        pairs = [(sender, receiver), (receiver, sender)] if both_ways else [(sender, receiver)]
        for a, b in pairs:
            if (a, b) not in self._cut:
                _tc(
                    self.namespace(a),
                    "qdisc",
                    "replace",
                    "dev",
                    self._device(a, b),
                    "root",
                    "pfifo",
                    "limit",
                    "0",
                )
                self._cut.add((a, b))

    def split(self, side: Iterable[str], other: Iterable[str]) -> None:
        """Two sides that do not hear each other; each side stays whole."""
        others = list(other)
        for a in side:
            for b in others:
                self.cut(a, b)

    def isolate(self, node: str) -> None:
        self.split([node], [n for n in self.nodes if n != node])

    def heal(self) -> None:
        """Every link carries traffic again both ways."""
        for a, b in sorted(self._cut):
            _tc(self.namespace(a), "qdisc", "del", "dev", self._device(a, b), "root")
        self._cut.clear()

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


def _tc(namespace: str, *args: str) -> None:
    _run(["tc", "-n", namespace, *args])


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
