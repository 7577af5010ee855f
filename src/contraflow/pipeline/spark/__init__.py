"""Pipelines hosted on Spark: one streaming query per pipeline, from its input topics to its output topics.

`query.start_pipeline` builds the query (the stateless part in the sources'
read tasks, the stateful rest in `transformWithState`), `run` starts it for a
flow and hears back from it through `listener`, `state` is where Spark keeps
its checkpoint and the pipeline's state, and `local` runs one pipeline over a
finite input for `contraflow query`. See docs/pipelines-spark.md.
"""
