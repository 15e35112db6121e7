"""Test configuration: XLA's backend optimisations and CPU fusion emitters off, 8 CPU devices.

The flags must be set before JAX initialises its CPU backend, hence here; they hold for
every program of the test process (and of the processes it starts), so no test compares
an optimised program with an unoptimised one. Backend (LLVM) optimisations off compile
the same HLO programs about a third faster: the suite checks semantics (dtypes, counts,
one executable, equal runs of one program, equality to float rounding, printed outputs),
never speed. XLA's CPU fusion emitters off: fused kernels come from XLA's elemental
LLVM IR emitters instead of its MLIR fusion pipeline, in about half the compile time (the
property matrix's scans and vmaps); rounding may differ from the default compiler's, as
with the backend flags. XLA aborts on a flag it does not know, so these two are set for the
jaxlib versions they were checked with. Eigen's intra-op thread pool off
(``--xla_cpu_multi_thread_eigen=false``): the suite runs one pytest worker a core, and
each worker's own pool only contended with the other worker (16% less CPU time and wall
time on 2 cores, measured on the library's five largest files). One LLVM module per
program (``--xla_cpu_parallel_codegen_split_count=1``): XLA's CPU compiler splits a
program's module into parts compiled on a thread pool, which here only added work (20%
less CPU time, 15% less wall time on four of the largest test files, idle cores). A
user's ``XLA_FLAGS`` come after these and win.
"""

import os
from importlib.metadata import version

FAST = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
        "--xla_cpu_multi_thread_eigen=false")
if version("jaxlib").startswith("0.10."):
    FAST += " --xla_cpu_use_fusion_emitters=false --xla_cpu_parallel_codegen_split_count=1"
os.environ["XLA_FLAGS"] = " ".join(
    [FAST, os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8"]
).replace("  ", " ")
