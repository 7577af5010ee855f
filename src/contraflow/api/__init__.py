"""The REST API (Tremor-compatible, plus deploy/undeploy and Prometheus metrics) and its runtime facade."""
