"""The SPU cluster's controller (SC, `contraflow sc run`): replica assignment, leaders, in-sync sets, durable metadata.

It talks to SPUs and clients over the SPU protocol and imports nothing of an
SPU's own node (`contraflow.spu.node`); what both sides share is in
`contraflow.spu.protocol` (`cluster_metadata`, the heartbeat messages).
"""
