"""The vmapped attack runner: exact counting, agreement with a plain loop, the box."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoaq_jax
from benchmarks.attack import methods, objective, runner

EPS = 0.3
SHAPE = (4, 4, 1)


@functools.lru_cache(maxsize=None)
def weights():
    return 3.0 * jax.random.normal(jax.random.key(42), (16, 10))


def linear_model(images):
    """A tiny linear softmax classifier on 4x4 gray images."""
    flat = images.reshape(*images.shape[:-3], -1)
    return jax.nn.log_softmax(flat @ weights(), axis=-1)


def make_tasks(goal, n_images=2, seeds=(3, 4, 5)):
    images = np.asarray(jax.random.uniform(jax.random.key(7), (n_images, *SHAPE)))
    labels = np.asarray(jnp.argmax(linear_model(jnp.asarray(images)), -1))
    image = np.repeat(np.arange(n_images), len(seeds))
    return runner.Tasks(images[image], objective.attacked_class(labels[image], goal),
                        np.tile(seeds, n_images).astype(np.int32))


def build(name, learning_rate=0.05):
    """Small-problem optimizers (the attack's forward differences, a larger step)."""
    def make(key):
        if name == "zoaq":
            # refresh=1 recomputes the retained sum every step: the batched model's last-bit
            # differences from the plain loop then cannot accumulate in the running sum into
            # a different gate decision. The runner's bookkeeping is under test here, not
            # the rounding of ZoAQ's running sums (tests/library/test_retained.py).
            opt = zoaq_jax.chain(
                zoaq_jax.zoaq_estimator(1, 2, mu=0.5, retention=zoaq_jax.retention.fifo(
                    8, refresh=1), difference="forward", key=key),
                zoaq_jax.scale_by_radazo(), optax.scale_by_learning_rate(learning_rate))
        else:
            opt = zoaq_jax.radazo(learning_rate, k=2, mu=0.5, difference="forward", key=key)
        return opt
    return make


def reference(loss, make_opt, tasks, max_steps):
    """Each attack as a plain Python loop: the definition the runner must match."""
    dim = int(np.prod(SHAPE))

    @jax.jit
    def init(seed):
        x = runner.initial_point(seed, dim)
        return x, make_opt(runner.direction_key(seed)).init(x)

    @jax.jit
    def step(x, state, value, image0, cls, seed):
        opt = make_opt(runner.direction_key(seed))
        updates, state = opt.update(None, state, x, value_fn=loss, value=value,
                                    image0=image0, cls=cls)
        return optax.apply_updates(x, updates), state

    f = jax.jit(loss)
    for image0, cls, seed in zip(*tasks):
        x, state = init(seed)
        for t in range(1, max_steps + 1):
            value = f(x, image0, cls)
            if value < 0:
                break
            x, state = step(x, state, value, image0, cls, seed)
        yield bool(value < 0), t + int(optax.tree.get(state, "num_queries")), t, x


def test_runner_matches_plain_loop_with_refill_and_compaction():
    """One adaptive method (ZoAQ): the runner treats the optimizer state as an opaque tree
    (refill and compaction are ``tree.map``s), so another alias exercises no other code."""
    spec = "zoaq"
    loss = objective.attack_loss(linear_model, EPS, "targeted")
    tasks = make_tasks("targeted")
    config = runner.AttackConfig(max_steps=40, width=2, chunk=3, min_width=1, trace_len=50)
    out = runner.run_attacks(loss, build(spec), tasks, config)
    assert out.widths[0] == 2 and out.widths[-1] == 1  # refilled, then compacted
    expected = list(reference(loss, build(spec), tasks, 40))
    for i, (ok, queries, steps, x) in enumerate(expected):
        got = (bool(out.success[i]), int(out.num_queries[i]), int(out.steps[i]))
        assert got == (ok, queries, steps)
        np.testing.assert_allclose(out.x[i], x, rtol=1e-3, atol=1e-3)  # vmap vs not: fp drift
        # the trace holds exactly the centre values queried
        assert np.isfinite(out.trace_loss[i, :steps]).all()
        assert np.isnan(out.trace_loss[i, steps:]).all()
        assert (out.trace_loss[i, steps - 1] < 0) == ok
    assert out.success.any()
    assert out.lane_steps_useful == out.steps.sum() <= out.lane_steps_executed


def test_counting_stops_at_success():
    """Fixed K=2: every iteration costs 1 + 2 calls except the successful one (1 call)."""
    loss = objective.attack_loss(linear_model, EPS, "targeted")
    tasks = make_tasks("targeted", n_images=2, seeds=tuple(range(8)))
    out = runner.run_attacks(loss, build("radazo"), tasks, runner.AttackConfig(max_steps=30))
    assert out.success.any() and (~out.success).any()
    np.testing.assert_array_equal(out.num_queries[out.success], 3 * out.steps[out.success] - 2)
    np.testing.assert_array_equal(out.steps[~out.success], 30)
    np.testing.assert_array_equal(out.num_queries[~out.success], 90)


def test_already_adversarial_costs_one_query():
    loss = objective.attack_loss(linear_model, EPS, "untargeted")
    tasks = make_tasks("untargeted")
    wrong = tasks._replace(cls=(tasks.cls + 1) % 10)  # "true label" the model does not predict
    out = runner.run_attacks(loss, build("radazo"), wrong, runner.AttackConfig(max_steps=5))
    np.testing.assert_array_equal(out.num_queries, 1)
    assert out.success.all()


def brightness_model(images):
    """Classes ordered by mean brightness m: logit_j = 40 j m - j^2 (class ~ round(20 m))."""
    m = jnp.mean(images, axis=(-3, -2, -1))[..., None]
    j = jnp.arange(10.0)
    return jax.nn.log_softmax(40 * j * m - j**2, axis=-1)


def test_end_to_end_tiny_targeted_attack_succeeds_inside_the_box():
    eps, goal = 0.2, "targeted"
    loss = objective.attack_loss(brightness_model, eps, goal)
    images = np.asarray(jax.random.uniform(jax.random.key(0), (3, *SHAPE), minval=0.2, maxval=0.4))
    labels = np.asarray(jnp.argmax(brightness_model(jnp.asarray(images)), -1))
    tasks = runner.Tasks(np.repeat(images, 2, 0),
                         objective.attacked_class(np.repeat(labels, 2), goal),
                         np.tile([101, 202], 3).astype(np.int32))
    method = methods.parse("zoaq")  # the benchmark's own chain and MNIST settings
    out = runner.run_attacks(loss, lambda key: methods.build(method, "mnist", key), tasks,
                             runner.AttackConfig(max_steps=300))
    assert out.success.all() and (out.steps > 5).sum() >= 3  # most need real work
    adversarial = jax.vmap(lambda x, i: objective.perturbed_image(x, i, eps))(
        jnp.asarray(out.x), jnp.asarray(tasks.image0))
    assert float(jnp.max(jnp.abs(adversarial - tasks.image0))) <= eps + 1e-6
    assert float(jnp.min(adversarial)) >= 0 and float(jnp.max(adversarial)) <= 1
    np.testing.assert_array_equal(np.asarray(jnp.argmax(brightness_model(adversarial), -1)),
                                  tasks.cls)


def test_bad_tasks():
    loss = objective.attack_loss(linear_model, EPS, "targeted")
    tasks = make_tasks("targeted")
    with pytest.raises(ValueError, match="same length"):
        runner.run_attacks(loss, build("radazo"), tasks._replace(seed=tasks.seed[:2]),
                           runner.AttackConfig())
