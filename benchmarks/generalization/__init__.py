"""The held-out generalization protocol of ``auto_k`` (``python -m benchmarks generalization``)."""
