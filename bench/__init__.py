"""Benchmark harness for hudilite (see bench/README.md and shared/docs/bench-workload.md)."""
