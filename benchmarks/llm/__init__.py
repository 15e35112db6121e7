"""Forward-only LoRA fine-tuning of language models (the paper's Section 5.3, MeZO protocol).

``python -m benchmarks llm --help``. Modules: ``llama`` / ``opt`` (flax NNX models),
``layers`` and ``lora`` (building blocks, adapters), ``gguf_loader`` / ``hf_loader``
(checkpoints), ``tokenizer``, ``fetch`` (the embedded model and data, cached), ``data``
(loaders and splits), ``tasks`` (templates, scoring, losses), ``models`` (the ``--model``
registry), ``methods`` (the LLM defaults of the shared method registry), ``config``
(the configuration dataclass and its presets), ``experiment`` (data and model setup, the
seed x method loop, the results payload), ``train`` (loop, evaluation, timing),
``report`` (JSON, figure, Markdown), ``cli`` (the thin command line).
"""
