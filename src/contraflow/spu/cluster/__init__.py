"""Each SPU's side of a cluster: its replicas (leader and follower), epoch history, idempotent
producers and exactly-once commits read from the log; `contraflow cluster` runs a local
cluster (see docs/spu-cluster.md). The controller is `contraflow.spu.controller`."""
