"""contraflow: Troy/Trickle event flows on Spark Structured Streaming over a segmented log."""

__version__ = "0.1.0"
