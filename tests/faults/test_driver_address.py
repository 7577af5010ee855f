"""A driver on a host of its own advertises the address its host reaches a standalone master
from (`contraflow.spark.session.driver_address`): the executors on the master's side connect
back to it there. Two nodes of the partition harness's network, no Spark."""

from __future__ import annotations

import os

import pytest

from contraflow.spark.session import advertise_driver_address, driver_address
from tests.faults.netns import Network


def test_the_driver_advertises_its_address_on_the_route_to_the_master(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    network = Network(["runtime", "master"])
    try:
        master = f"spark://{network.address('master')}:7077"
        monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
        monkeypatch.delenv("SPARK_LOCAL_HOSTNAME", raising=False)
        with network.inside("runtime"):
            assert driver_address(master) == network.address("runtime")  # not loopback, not the host's
            advertise_driver_address(master)
        assert os.environ["SPARK_LOCAL_IP"] == network.address("runtime")
        monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")  # the user's choice stays
        advertise_driver_address(master)
        assert os.environ["SPARK_LOCAL_IP"] == "10.1.2.3"
        assert driver_address("local[2]") is None
    finally:
        network.close()
