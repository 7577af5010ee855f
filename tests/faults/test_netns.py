"""The harness's loss and delay (tests/faults/netns.py) do what they say on two nodes: a lossy
link drops a share of what crosses it and a healed one nothing; a delayed link holds every
packet (a round trip over it takes at least twice the delay: a lower bound, which load cannot
break), and healing releases what it holds instead of dropping it."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.faults.netns import Network

DATAGRAMS = 400


@pytest.fixture
def network() -> Iterator[Network]:
    network = Network(["a", "b"])
    try:
        yield network
    finally:
        network.close()


def udp_delivered(network: Network) -> int:
    """How many of DATAGRAMS sent from a to b arrive (b drains after each send: its buffer
    never fills)."""
    with network.inside("b"):
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with network.inside("a"):
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with receiver, sender:
        receiver.bind((network.address("b"), 0))
        receiver.setblocking(False)
        got = 0
        for _ in range(DATAGRAMS):
            sender.sendto(b"x", receiver.getsockname())
            time.sleep(0.0002)  # time to cross the router
            got += _drain(receiver)
        receiver.settimeout(0.2)
        return got + _drain(receiver)


def _drain(sock: socket.socket) -> int:
    count = 0
    try:
        while True:
            sock.recv(16)
            count += 1
    except (BlockingIOError, TimeoutError):
        return count


def test_a_lossy_link_drops_a_share_and_a_healed_one_none(network: Network) -> None:
    network.lose("b", 30)
    lossy = udp_delivered(network)
    # 30% drawn 400 times: ~280 arrive (sd ~9); these bounds are 8 sd away
    assert 200 < lossy < 360, lossy
    network.heal()
    assert udp_delivered(network) == DATAGRAMS


def round_trip_s(client: socket.socket, server: socket.socket) -> float:
    began = time.monotonic()
    client.sendall(b"ping")
    assert server.recv(4) == b"ping"
    server.sendall(b"pong")
    assert client.recv(4) == b"pong"
    return time.monotonic() - began


def test_a_delayed_link_holds_every_packet_and_healing_releases_them(network: Network) -> None:
    with network.inside("b"):
        listener = socket.create_server((network.address("b"), 0))
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with network.inside("a"):
        client = socket.create_connection(listener.getsockname())
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server, _ = listener.accept()
    with listener, client, server, receiver, sender:
        receiver.bind((network.address("b"), 0))
        network.delay("b", 0.1)
        # the request leaves the router on b's link, the answer enters it there: each held 0.1 s
        assert min(round_trip_s(client, server) for _ in range(3)) >= 0.2
        network.heal()
        round_trip_s(client, server)  # the connection carries on
        # a datagram held for a minute is let through at the heal (UDP: were it dropped, nothing
        # would send it again)
        network.delay("b", 60)
        sender.sendto(b"held", receiver.getsockname())
        network.heal()
        receiver.settimeout(30)
        assert receiver.recv(16) == b"held"
