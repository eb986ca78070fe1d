"""Operator-facing views of a running Haki: Prometheus metrics and the trace inspector pages."""
