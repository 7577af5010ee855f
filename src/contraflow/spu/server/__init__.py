"""The SPU server: asyncio, binary protocol over TCP (see docs/spu-server.md)."""

from contraflow.spu.protocol.address import parse_addr
from contraflow.spu.server.app import ServerConfig, SpuServer
from contraflow.spu.server.connection import Limits

__all__ = ["Limits", "ServerConfig", "SpuServer", "parse_addr"]
