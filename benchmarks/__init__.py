"""Benchmarks for zoaq_jax: ``python -m benchmarks <command> --help``."""
