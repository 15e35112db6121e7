"""tuning_free never diverges on the generalization benchmark's objectives (both sets).

Each objective runs as the benchmark runs it (its start box, a fresh data key a step for
the noisy ones), for 2,000 calls told as the budget, 2 seeds (1 at d = 10^5): every logged
gap is finite, the final gap is below the start's, and the budget holds. The two
objectives at d >= 10^4 take 30 s of the suite's time and are marked slow
(``python -m pytest -m slow tests/bench/test_tuning_free_objectives.py``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoaq_jax
from benchmarks import loops
from benchmarks.generalization.experiment import _start
from benchmarks.generalization.objectives import HELD_OUT, TUNING

BUDGET = 2000
PROBLEMS = [pytest.param(which, name, marks=[pytest.mark.slow] if problems[name].dim >= 10_000
                         else []) for which, problems in (("heldout", HELD_OUT), ("tuning", TUNING))
            for name in sorted(problems)]


@pytest.mark.parametrize("which, name", PROBLEMS)
def test_tuning_free_does_not_diverge(which, name):
    p = (HELD_OUT if which == "heldout" else TUNING)[name]
    program = loops.anytime_program(
        lambda key: zoaq_jax.tuning_free(BUDGET, key=key), lambda x, batch, fid: p.fn(x, batch),
        lambda x, fid: p.gap(x), _start(p), BUDGET, 8)
    seeds = jnp.arange(1 if p.dim > 10_000 else 2)  # one seed at d = 10^5 (test time)
    calls, gaps, _ = jax.device_get(program(seeds, jnp.asarray([0, 0])))
    for c, g in zip(calls, gaps):
        used = c < np.iinfo(np.int32).max
        assert np.all(np.isfinite(g[used])), name
        assert g[used][-1] < g[0], name
        assert c[used][-1] <= BUDGET
