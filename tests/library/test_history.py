"""The FIFO ring buffer of records."""

import jax.numpy as jnp
import numpy as np

from zoaq_jax._src import history


def _index(n, offset):
    return offset + jnp.arange(n, dtype=jnp.int32)


def _ids(h):
    """Record identities (their responses) from oldest to newest."""
    cap = h.responses.shape[0]
    order = [(int(h.head) - int(h.size) + j) % cap for j in range(int(h.size))]
    return [float(h.responses[i]) for i in order]


def test_push_keeps_the_newest_records_in_order():
    h = history.init(5)
    pushed = []
    pushes = [(3, [1, 1, 1]), (4, [1, 0, 1, 1]), (2, [0, 0]), (7, [1] * 7)]
    for step, (n, keep) in enumerate(pushes):
        resp = jnp.arange(n, dtype=jnp.float32) + 100 * step
        h = history.push(h, _index(n, 10 * step), resp, jnp.int32(step), jnp.array(keep, bool))
        pushed += [float(r) for r, k in zip(resp, keep) if k]
        assert _ids(h) == pushed[-5:]
        assert int(h.size) == min(len(pushed), 5)
        assert int(jnp.sum(history.valid(h))) == int(h.size)


def test_indices_and_steps_follow_their_records():
    h = history.init(4)
    index = _index(6, 20)
    h = history.push(h, index, jnp.arange(6.0), jnp.int32(3), jnp.ones(6, bool))
    for slot in np.flatnonzero(np.asarray(history.valid(h))):
        i = int(h.responses[slot])
        assert int(h.index[slot]) == int(index[i])
        assert int(h.steps[slot]) == 3
    assert sorted(float(r) for r in h.responses) == [2.0, 3.0, 4.0, 5.0]
