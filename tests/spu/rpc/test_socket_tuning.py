"""Socket tuning on both ends: a socket the peer already closed is reported, not raised."""

from __future__ import annotations

import socket

from contraflow.spu.protocol.address import tune_socket


def test_a_live_socket_is_tuned_and_a_closed_one_is_reported() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname()[:2])
        accepted, _ = server.accept()
        with client, accepted:
            assert tune_socket(accepted) is True
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert tune_socket(accepted) is False  # closed: fd -1, as asyncio leaves a dead transport's
