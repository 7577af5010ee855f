"""The schema registry in the SPU: Confluent's REST API over schemas kept in the log (docs/registry.md)."""

from contraflow.spu.registry.server import RegistryServer, ThreadedRegistry

__all__ = ["RegistryServer", "ThreadedRegistry"]
