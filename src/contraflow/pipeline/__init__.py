"""Running Trickle pipelines: the pure-Python executor (`PipelineExecutor`) and a local runner.

The Spark execution (`contraflow.pipeline.spark`) runs the same executor in the sources' read
tasks and in `transformWithState`; see docs/pipelines.md.
"""

from contraflow.pipeline.executor import PipelineExecutor

__all__ = ["PipelineExecutor"]
