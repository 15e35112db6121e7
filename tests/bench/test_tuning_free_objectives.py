"""tuning_free never diverges on the generalization benchmark's objectives (both sets).

Each objective runs as the benchmark runs it (its start box, a fresh data key a step for
the noisy ones), for 2,000 calls told as the budget, 2 seeds (1 at d = 10^5): every logged
gap is finite, the final gap is below the start's, and the budget holds. The objectives
that share a dimension and a start box share one compiled program: the benchmark's
objective id (``fid``) picks the objective (``lax.switch``) and each is run with its own
id, so that the optimizer's loop is compiled once a group instead of once an objective.
The two objectives at d >= 10^4 take 30 s of the suite's time and are marked slow
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
GROUPS: dict[tuple[int, float], list[str]] = {}  # (dim, box) -> "which-name" of each problem
PROBLEMS = {}
for which, problems in (("heldout", HELD_OUT), ("tuning", TUNING)):
    for name in sorted(problems):
        PROBLEMS[f"{which}-{name}"] = problems[name]
        GROUPS.setdefault((problems[name].dim, problems[name].box), []).append(f"{which}-{name}")


@pytest.mark.parametrize("names", [
    pytest.param(names, id="+".join(names),
                 marks=[pytest.mark.slow] if dim >= 10_000 else [])
    for (dim, _), names in GROUPS.items()])
def test_tuning_free_does_not_diverge(names):
    ps = [PROBLEMS[name] for name in names]
    program = loops.anytime_program(
        lambda key: zoaq_jax.tuning_free(BUDGET, key=key),
        lambda x, batch, fid: jax.lax.switch(fid, [p.fn for p in ps], x, batch),
        lambda x, fid: jax.lax.switch(fid, [p.gap for p in ps], x),
        _start(ps[0]), BUDGET, 8)  # one start box: the group's
    seeds = jnp.arange(1 if ps[0].dim > 10_000 else 2)  # one seed at d = 10^5 (test time)
    for fid, name in enumerate(names):
        calls, gaps, _ = jax.device_get(program(seeds, jnp.asarray([fid, fid])))
        for c, g in zip(calls, gaps):
            used = c < np.iinfo(np.int32).max
            assert np.all(np.isfinite(g[used])), name
            assert g[used][-1] < g[0], name
            assert c[used][-1] <= BUDGET
