"""The SPU storage engine: segments, indexes, partitions, the store, recovery, control values.

The record batch format is the protocol's (`contraflow.spu.protocol.batch`); its
names are re-exported here because the engine stores batches as they arrive.
"""

from contraflow.spu.protocol.batch import (
    BatchHeader,
    CorruptBatchError,
    DecodedBatch,
    Record,
    check_batch,
    decode_batch,
    encode_batch,
    iter_batches,
    verify_crc,
)
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.topics import FlushPolicy, PartitionInfo, TopicConfig, TopicDescription
from contraflow.spu.storage.errors import CorruptSegmentError, StorageError

__all__ = [
    "BatchHeader",
    "Compression",
    "CorruptBatchError",
    "CorruptSegmentError",
    "DecodedBatch",
    "FlushPolicy",
    "PartitionInfo",
    "Record",
    "StorageError",
    "TopicConfig",
    "TopicDescription",
    "check_batch",
    "decode_batch",
    "encode_batch",
    "iter_batches",
    "verify_crc",
]
