"""The SPU protocol's door onto the node: the handlers and fetch streams.

The process that runs it is `contraflow.spu.app` (see docs/spu-server.md).
"""

from contraflow.spu.protocol.address import parse_addr
from contraflow.spu.rpc.server import Limits

__all__ = ["Limits", "parse_addr"]
