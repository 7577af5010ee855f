"""OffsetCommit and OffsetFetch: a group's positions, stored as the SPU's consumer
offsets (the group id is the consumer name; on a cluster, the replicated
consumer-offsets table), so they survive restarts and failovers and are the
same offsets `contraflow` tools see. Commit metadata strings are not kept."""

from __future__ import annotations

from contraflow.spu.kafka.apis.base import KafkaRequest, response
from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.coordinator import check_group_id
from contraflow.spu.kafka.errors import error_code_of
from contraflow.spu.kafka.wire import Reader, Writer

NO_OFFSET = -1


async def _commit_all(broker: Broker, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]) -> list:
    """Store each offset; one error code per partition."""
    results = []
    for name, partitions in topics:
        codes = []
        for index, offset in partitions:
            try:
                await broker.topology.commit_offset(group_id, name, index, offset)
                codes.append((index, 0))
            except Exception as err:
                codes.append((index, error_code_of(err)))
        results.append((name, codes))
    return results


async def offset_commit(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    group_id, generation, member_id = body.string(), body.int32(), body.string()
    if version >= 7:
        body.nullable_string()  # group instance id
    if 2 <= version <= 4:
        body.int64()  # retention time

    def read_partition(r: Reader) -> tuple[int, int]:
        index, offset = r.int32(), r.int64()
        if version >= 6:
            r.int32()  # committed leader epoch
        r.nullable_string()  # metadata
        return index, offset

    topics = body.array(lambda r: (r.string(), r.array(read_partition)))
    try:
        check_group_id(group_id)
        await broker.check_coordinator(group_id)
        broker.coordinator.check_commit(group_id, generation, member_id)
        results = await _commit_all(broker, group_id, topics)
    except Exception as err:
        code = error_code_of(err)
        results = [(name, [(index, code) for index, _ in parts]) for name, parts in topics]
    return response(version, 3).array(
        results, lambda w, t: w.string(t[0]).array(t[1], lambda w2, p: w2.int32(p[0]).int16(p[1]))
    )


async def _fetch_all(broker: Broker, group_id: str, topics: list[tuple[str, list[int]]] | None) -> list:
    """(topic, [(partition, offset, error)]); None asks for every committed one."""
    if topics is None:
        topology = broker.topology
        topics = [(name, list(range(len(topology.partitions_of(name))))) for name in topology.topic_names()]
        listing = True
    else:
        listing = False
    results = []
    for name, indexes in topics:
        rows = []
        for index in indexes:
            try:
                offset = await broker.topology.committed_offset(group_id, name, index)
                rows.append((index, NO_OFFSET if offset is None else offset, 0))
            except Exception as err:
                rows.append((index, NO_OFFSET, error_code_of(err)))
        if listing:
            rows = [row for row in rows if row[1] != NO_OFFSET]
        if rows or not listing:
            results.append((name, rows))
    return results


async def offset_fetch(broker: Broker, request: KafkaRequest) -> Writer:
    body, version = request.body, request.version
    group_id = body.string()
    topics = body.nullable_array(lambda r: (r.string(), r.array(Reader.int32)))
    try:
        check_group_id(group_id)
        await broker.check_coordinator(group_id)
        results, error = await _fetch_all(broker, group_id, topics), 0
    except Exception as err:
        results, error = [], error_code_of(err)
    out = response(version, 3)

    def write_partition(w: Writer, row: tuple[int, int, int]) -> None:
        w.int32(row[0]).int64(row[1])
        if version >= 5:
            w.int32(-1)  # leader epoch
        w.string("").int16(row[2])

    out.array(results, lambda w, t: w.string(t[0]).array(t[1], write_partition))
    if version >= 2:
        out.int16(error)
    return out
