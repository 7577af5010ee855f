"""The languages: Troy (deployment), Trickle (pipelines) and tremor-script (expressions)."""
