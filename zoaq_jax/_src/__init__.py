"""Implementation modules of zoaq_jax; import the public API from ``zoaq_jax``."""
