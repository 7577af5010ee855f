"""Running Trickle pipelines: the pure-Python executor (`PipelineExecutor`) and a local runner.

The Spark execution (`spark_*.py`) wraps the same executor in `mapInArrow`
and `transformWithState`; see docs/pipelines.md.
"""

from contraflow.pipeline.executor import PipelineExecutor

__all__ = ["PipelineExecutor"]
