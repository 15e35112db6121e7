"""Templates, fixed-shape encoding, the single-token fast path and the losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from llm_helpers import tiny

from benchmarks.llm import tasks
from benchmarks.llm.data import CopaExample, SentimentExample
from benchmarks.llm.models import lora


def test_templates():
    sst2 = tasks.get_task("sst2")
    ex = SentimentExample("A gripping film .", 1)
    assert sst2.context(ex) == "A gripping film . It was"
    assert sst2.options(ex) == [" terrible", " great"]
    copa = tasks.get_task("copa")
    cause = CopaExample(
        "My body cast a shadow over the grass.", "The sun was rising.", "I was hungry.", "cause", 0
    )
    assert copa.context(cause) == "My body cast a shadow over the grass because"
    assert copa.options(cause) == [" the sun was rising.", " I was hungry."]
    effect = CopaExample("It rained.", "Streets got wet.", "Ice melted.", "effect", 1)
    assert copa.context(effect) == "It rained so"
    with pytest.raises(ValueError, match="Unknown task"):
        tasks.get_task("mnli")


def _lively(model):
    """The model with non-zero adapters, so the scores depend on LoRA too."""
    graphdef, adapters, base = lora.split(model)
    return lora.merge(graphdef, jax.tree.map(lambda x: x + 0.05, adapters), base)


def _jitted(fn):
    """``fn(model, *args)`` compiled once per shape (eager tiny models are slow)."""
    cache = {}

    def call(model, *args):
        graphdef, state = nnx.split(model)
        if graphdef not in cache:
            cache[graphdef] = jax.jit(lambda s, *a: fn(nnx.merge(graphdef, s), *a))
        return cache[graphdef](state, *jax.tree.map(jnp.asarray, args))

    return call


_option_scores = _jitted(tasks.option_scores)
_logits = _jitted(lambda m, t: m(t))
_batch_loss = _jitted(lambda m, b: tasks.batch_loss(m, b, "option_lm"))


def _scores(model, enc):
    return np.asarray(_option_scores(model, enc))


def test_fast_path_equals_general_scoring():
    model, tk, task, splits = tiny("sst2")
    model = _lively(model)
    layout = tasks.measure(task, tk, splits.train)
    assert layout.single_token
    fast = tasks.encode(task, tk, splits.train, layout)
    slow = tasks.encode(task, tk, splits.train, layout, fast_path=False)
    assert fast["tokens"].shape[1] == 1 and slow["tokens"].shape[1] == 2
    a, b = _scores(model, fast), _scores(model, slow)
    np.testing.assert_allclose(a, b, atol=1e-5)
    for kind in tasks.LOSS_KINDS:
        la = tasks.example_losses(jnp.asarray(a), jnp.asarray(fast["label"]), kind)
        lb = tasks.example_losses(jnp.asarray(b), jnp.asarray(slow["label"]), kind)
        np.testing.assert_allclose(np.asarray(la), np.asarray(lb), atol=1e-5)


def test_scores_and_losses_match_a_direct_computation():
    model, tk, task, splits = tiny("copa")
    model = _lively(model)
    layout = tasks.measure(task, tk, splits.train)
    assert not layout.single_token and layout.option_length > 1
    enc = tasks.encode(task, tk, splits.train[:4], layout)
    scores = _scores(model, enc)
    # Direct: the full logits of each (context + option) sequence, unpadded, one by one.
    for i, ex in enumerate(splits.train[:4]):
        ctx = tk.prefix() + tk.encode(task.context(ex))
        opts = [tk.encode(o) for o in task.options(ex)]
        seqs = np.array([ctx + opts[0], ctx + opts[1]]) if len(opts[0]) == len(opts[1]) else None
        for c, opt in enumerate(opts):
            seq = seqs[c : c + 1] if seqs is not None else np.array([ctx + opt])
            logp = np.asarray(jax.nn.log_softmax(_logits(model, seq)[0], -1))
            want = np.mean([logp[len(ctx) - 1 + j, t] for j, t in enumerate(opt)])
            np.testing.assert_allclose(scores[i, c], want, atol=1e-5)
    label = enc["label"]
    ce = tasks.example_losses(jnp.asarray(scores), jnp.asarray(label), "classification")
    manual = -np.log(np.exp(scores[np.arange(4), label]) / np.exp(scores).sum(1))
    np.testing.assert_allclose(np.asarray(ce), manual, atol=1e-5)
    lm = tasks.example_losses(jnp.asarray(scores), jnp.asarray(label), "option_lm")
    np.testing.assert_allclose(np.asarray(lm), -scores[np.arange(4), label], atol=1e-6)
    # COPA trains on the correct option only: the same loss from one sequence an example.
    train = tasks.encode(task, tk, splits.train[:4], layout, only_correct=True)
    assert train["tokens"].shape[1] == 1 and train["row"].shape[1] == 1
    np.testing.assert_allclose(
        float(_batch_loss(model, train)), float(np.mean(np.asarray(lm))), atol=1e-5
    )


def test_right_padding_does_not_change_scores():
    model, tk, task, splits = tiny("sst2")
    model = _lively(model)
    short = tasks.measure(task, tk, splits.train)
    long = tasks.Layout(short.max_length + 9, short.option_length, short.single_token)
    np.testing.assert_allclose(
        _scores(model, tasks.encode(task, tk, splits.train[:5], short)),
        _scores(model, tasks.encode(task, tk, splits.train[:5], long)),
        atol=1e-5,
    )


def test_padded_eval_batches_count_each_example_once():
    model, tk, task, splits = tiny("sst2", n=11)
    layout = tasks.measure(task, tk, splits.train)
    enc = tasks.encode(task, tk, splits.train, layout)
    batches = list(tasks.eval_batches(enc, 4))
    assert len(batches) == 3 and [b["weight"].sum() for b in batches] == [4, 4, 3]
    metrics = _jitted(lambda m, b: tasks.batch_metrics(m, b, "classification"))
    sums = [metrics(model, b) for b in batches]
    whole = metrics(model, enc)
    np.testing.assert_allclose(sum(float(s["loss"]) for s in sums), float(whole["loss"]), rtol=1e-5)
    assert sum(float(s["count"]) for s in sums) == 11


def test_too_long_sequences_are_an_error():
    _, tk, task, splits = tiny("sst2")
    with pytest.raises(ValueError, match="longer than max_length=4"):
        tasks.measure(task, tk, splits.train, max_length=4)
    layout = tasks.measure(task, tk, splits.train)
    with pytest.raises(ValueError, match="fast path"):
        tasks.encode(
            task,
            tk,
            splits.train,
            tasks.Layout(layout.max_length, 2, single_token=False),
            fast_path=True,
        )


def test_prompt_list_templates_and_demonstrations():
    train = [SentimentExample(f"s{i}", i % 3 == 0) for i in range(12)]
    review = tasks.get_task("sst2", "review", train)
    ex = SentimentExample("a fine film", 1)
    assert review.context(ex) == "Review: a fine film\nSentiment:"
    assert review.options(ex) == [" negative", " positive"]
    demo = tasks.get_task("sst2", "demo_it_was", train)
    labels = [d.label for d in tasks.demonstrations(train, 4)]
    assert labels == [0, 1, 0, 1]
    assert demo.context(ex).endswith("\n\na fine film It was")
    assert demo.context(ex).count(" It was great\n\n") == 2
    with pytest.raises(ValueError, match="Unknown prompt"):
        tasks.get_task("sst2", "nope")
    with pytest.raises(ValueError, match="applies to sst2 only"):
        tasks.get_task("copa", "review")
