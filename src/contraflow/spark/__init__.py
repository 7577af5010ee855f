"""Spark bridge: the contraflow session builder and the `contraflow` streaming format.

`session()` builds a configured SparkSession; `register(spark)` adds the
`contraflow` format to a session built elsewhere. PySpark is imported only
when one of them is called.
"""

from contraflow.spark.session import register, session

__all__ = ["register", "session"]
