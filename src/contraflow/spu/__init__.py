"""The SPU: what travels on the wire (protocol), the framed connection (rpc), the log on disk
(storage), clients, one SPU's partitions and guarantees (node), its two protocols' doors
(server, kafka), the cluster's controller, and the process that composes them (app)."""
