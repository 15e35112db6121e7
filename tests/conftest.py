"""Test configuration: eight fake CPU devices for the sharding tests.

The flag must be set before JAX initialises its CPU backend, hence here.
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
