"""One SPU: its partitions and the guarantees it keeps, each in one room.

`partitions` is the single door to the storage engine (write gates, commit ranges,
wake-ups); `exactly_once/` commits staged batches once; `idempotence/` is the one
table of producers' last batches, for both protocols; `replication/` keeps a
cluster's replicas (the leader's side and the follower's apart) and the SPU's link
to the controller. `membership` says, once at start, whether this SPU is alone or
in a cluster; the protocols' doors (`spu.server`, `spu.kafka`) ask it, never
`is None`.
"""
