"""The runtime: flow instances (connectors, pipelines, channels), contraflow and quiescence."""
