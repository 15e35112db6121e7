"""Forward-only LoRA fine-tuning of language models (the paper's Section 5.3, MeZO protocol).

``python -m benchmarks llm --help``. The model zoo is the subpackage ``models`` (the
``--model`` registry; ``models.llama`` / ``models.opt``: flax NNX models, ``models.layers``
and ``models.lora``: building blocks, adapters, ``models.gguf_loader`` /
``models.hf_loader``: checkpoints, ``models.tokenizer``). The experiment: ``fetch`` (the
embedded model and data, cached), ``data`` (loaders and splits), ``tasks`` (templates,
scoring, losses), ``methods`` (the LLM defaults of the shared method registry), ``config``
(the configuration dataclass and its presets), ``experiment`` (the data and model setup,
cached per process; ``run(config, method)``; the results payload and its query regret),
``train`` (loop, evaluation, timing), ``baselines`` (prompts, linear probe, first order,
memory), ``report`` and ``tables`` (figure, Markdown), ``cli`` (the command line).
"""
