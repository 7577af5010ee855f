"""One module per group of Kafka APIs; `SERVED` is the table the listener dispatches on."""

from __future__ import annotations

from contraflow.spu.kafka.apis import admin, fetch, groups, metadata, offsets, produce, versions
from contraflow.spu.kafka.apis.base import Api, ApiKey, KafkaRequest

SERVED: dict[int, Api] = {
    api.key: api
    for api in (
        Api(ApiKey.PRODUCE, 3, 8, produce.produce),
        Api(ApiKey.FETCH, 4, 11, fetch.fetch),
        Api(ApiKey.LIST_OFFSETS, 1, 5, fetch.list_offsets),
        Api(ApiKey.METADATA, 0, 8, metadata.metadata),
        Api(ApiKey.OFFSET_COMMIT, 2, 7, offsets.offset_commit),
        Api(ApiKey.OFFSET_FETCH, 1, 5, offsets.offset_fetch),
        Api(ApiKey.FIND_COORDINATOR, 0, 2, groups.find_coordinator),
        Api(ApiKey.JOIN_GROUP, 0, 5, groups.join_group),
        Api(ApiKey.HEARTBEAT, 0, 3, groups.heartbeat),
        Api(ApiKey.LEAVE_GROUP, 0, 2, groups.leave_group),
        Api(ApiKey.SYNC_GROUP, 0, 3, groups.sync_group),
        Api(ApiKey.DESCRIBE_GROUPS, 0, 4, groups.describe_groups),
        Api(ApiKey.LIST_GROUPS, 0, 2, groups.list_groups),
        Api(ApiKey.API_VERSIONS, 0, 3, versions.api_versions, flexible_from=3),
        Api(ApiKey.CREATE_TOPICS, 0, 4, admin.create_topics),
        Api(ApiKey.DELETE_TOPICS, 0, 3, admin.delete_topics),
        Api(ApiKey.INIT_PRODUCER_ID, 0, 1, produce.init_producer_id),
    )
}
versions.register(SERVED)

__all__ = ["SERVED", "Api", "ApiKey", "KafkaRequest"]
