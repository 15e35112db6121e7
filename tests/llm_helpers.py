"""Tiny models and data shared by the LLM tests (nothing is downloaded)."""

from benchmarks.llm import data, lora, models, tasks


def tiny(task_name="sst2", arch="tiny-llama", n=24, seed=0):
    """``(model with adapters, tokenizer, task, splits)`` on synthetic data."""
    splits = data.synthetic_splits(task_name, n_train=n, n_dev=8, n_test=8, seed=seed)
    model, tk, _ = models.load_model(arch, words=data.vocabulary(splits), seed=seed)
    lora.apply_lora(model, key=seed)
    return model, tk, tasks.get_task(task_name), splits
