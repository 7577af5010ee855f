"""The log's commands: `topic`, `produce`, `consume` (`commands`), `spu run` (`server_commands`),
`sc run` and `cluster start/status/stop` (`cluster_commands`, over `local_cluster`)."""
