"""Tiny models and data shared by the LLM tests (nothing is downloaded)."""

from benchmarks.llm import data, models, tasks, train
from benchmarks.llm.models import lora


def tiny(task_name="sst2", arch="tiny-llama", n=24, seed=0, first=0):
    """``(model with adapters from layer first on, tokenizer, task, splits)`` on synthetic
    data."""
    splits = data.synthetic_splits(task_name, n_train=n, n_dev=8, n_test=8, seed=seed)
    model, tk, _ = models.load_model(arch, words=data.vocabulary(splits), seed=seed)
    lora.apply_lora(model, key=seed, first=first)
    return model, tk, tasks.get_task(task_name), splits


def tiny_bundle(task_name="sst2", first=0):
    """A :class:`train.Bundle` of the tiny LLaMA on 32 synthetic training examples, adapters
    from layer ``first`` on (nothing cached: pass ``first`` to the bundle for that)."""
    model, tk, task, splits = tiny(task_name, n=32, first=first)
    layout = tasks.measure(task, tk, splits.train + splits.dev + splits.test)
    enc = {
        name: tasks.encode(
            task,
            tk,
            getattr(splits, name),
            layout,
            only_correct=(name == "train" and task.loss_kind == "option_lm"),
        )
        for name in ("train", "dev", "test")
    }
    graphdef, adapters, base = lora.split(model)
    return train.Bundle(graphdef, adapters, base, task.loss_kind, **enc)
