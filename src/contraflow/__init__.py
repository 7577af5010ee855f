"""contraflow: Troy/Trickle event flows on Spark Structured Streaming over a segmented log."""

from contraflow import moved

__version__ = "0.1.0"

moved.install()  # old module paths keep importing (contraflow.moved.MOVED lists them)
