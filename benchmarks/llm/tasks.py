"""Task templates (MeZO's), fixed-shape encoding, option scoring and losses.

* SST-2: one prompt of :data:`PROMPTS`, by default MeZO's ``"<sentence> It was"`` +
  ``" terrible"`` / ``" great"`` (others: bad/good, ``"Review: <sentence>\nSentiment:"``
  negative/positive, either with 4 demonstrations); training loss = cross-entropy over
  the two candidates, each scored by the mean log-probability of its option tokens
  ("classification").
* COPA: the premise without its final period, ``" because"`` (cause) or ``" so"``
  (effect), then the choice with its first letter lower-cased unless it is "I"; training
  loss = mean negative log-probability of the correct option's tokens ("option_lm").
* Accuracy (both): argmax over candidates of the mean option log-probability.

Encoding pads every sequence on the right to one fixed length, so every batch has the
same shapes and the training step compiles once. With right padding and causal
attention, padding never influences the scored positions, so no attention mask is
needed. When every option is a single token, the candidates differ only in the token
scored after the shared context: the "fast path" encodes the context once and reads
every candidate's log-probability from that one sequence, which halves the forward
compute of a two-way task without changing any score (a causal model's prediction at
the last context position does not depend on what follows).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.llm.data import CopaExample, SentimentExample, Splits
from benchmarks.llm.models.tokenizer import Tokenizer

LOSS_KINDS = ("classification", "option_lm")


# SST-2 prompts: name -> (template, verbalizer (negative, positive), demonstrations).
# "{s}" is the sentence; demonstrations are filled templates with their answer, prepended.
PROMPTS = {
    "it_was": ("{s} It was", ("terrible", "great"), 0),  # MeZO's
    "it_was_good": ("{s} It was", ("bad", "good"), 0),
    "review": ("Review: {s}\nSentiment:", ("negative", "positive"), 0),
    "demo_it_was": ("{s} It was", ("terrible", "great"), 4),
    "demo_review": ("Review: {s}\nSentiment:", ("negative", "positive"), 4)}


def demonstrations(train: Sequence[SentimentExample], count: int) -> list[SentimentExample]:
    """``count`` training examples, alternately negative and positive (the first of each)."""
    by_label = [[ex for ex in train if ex.label == y] for y in (0, 1)]
    if min(len(b) for b in by_label) < count // 2:
        raise ValueError(f"{count} demonstrations need {count // 2} examples of each label.")
    return [by_label[i % 2][i // 2] for i in range(count)]


class SST2:
    """Sentiment with one of :data:`PROMPTS` and its demonstrations (:func:`get_task`)."""

    loss_kind = "classification"

    def __init__(self, prompt: str = "it_was", demos: Sequence[SentimentExample] = ()):
        self.template, self.verbalizer, _ = PROMPTS[prompt]
        self.prefix = "".join(self.template.format(s=d.sentence) + f" {self.verbalizer[d.label]}"
                              "\n\n" for d in demos)

    def context(self, ex: SentimentExample) -> str:
        return self.prefix + self.template.format(s=ex.sentence)

    def options(self, ex: SentimentExample) -> list[str]:
        return [f" {w}" for w in self.verbalizer]


class COPA:
    loss_kind = "option_lm"

    def context(self, ex: CopaExample) -> str:
        return ex.premise.strip().removesuffix(".") + (" because" if ex.question == "cause"
                                                       else " so")

    @staticmethod
    def _choice(text: str) -> str:
        text = text.strip()
        return " " + (text if text.split(" ", 1)[0] == "I" else text[:1].lower() + text[1:])

    def options(self, ex: CopaExample) -> list[str]:
        return [self._choice(ex.choice1), self._choice(ex.choice2)]


TASKS = {"sst2": SST2, "copa": COPA}


def get_task(name: str, prompt: str | None = None, train: Sequence = ()):
    """The task ``name``; SST-2 takes a prompt of :data:`PROMPTS` (demonstrations drawn
    from ``train``)."""
    if name not in TASKS:
        raise ValueError(f"Unknown task {name!r}; expected one of {sorted(TASKS)}.")
    if name != "sst2" or prompt is None:
        if prompt not in (None, "it_was"):
            raise ValueError(f"--prompt applies to sst2 only, got {prompt!r} for {name}.")
        return TASKS[name]()
    if prompt not in PROMPTS:
        raise ValueError(f"Unknown prompt {prompt!r}; expected one of {sorted(PROMPTS)}.")
    return SST2(prompt, demonstrations(train, PROMPTS[prompt][2]))


@dataclasses.dataclass(frozen=True)
class Layout:
    """Fixed shapes of an encoding: sequence length and option length."""

    max_length: int
    option_length: int
    single_token: bool  # every option of every example is one token


def tokenize(task, tokenizer: Tokenizer, ex) -> tuple[list[int], list[list[int]], int]:
    """``(context ids, option ids, label)`` of one example."""
    ctx = tokenizer.prefix() + tokenizer.encode(task.context(ex))
    opts = [tokenizer.encode(o) for o in task.options(ex)]
    if not ctx or any(not o for o in opts):
        raise ValueError(f"Empty context or option after tokenization in {ex!r}.")
    return ctx, opts, ex.label


def sequence_length(task, tokenizer: Tokenizer, ex) -> int:
    """Tokens of ``ex``'s context and its longest option."""
    ctx, opts, _ = tokenize(task, tokenizer, ex)
    return len(ctx) + max(len(o) for o in opts)


def measure(task, tokenizer: Tokenizer, examples: Sequence[Any], *,
            max_length: int | None = None, multiple: int = 8) -> Layout:
    """The layout that fits ``examples``: lengths rounded up to ``multiple`` unless
    ``max_length`` is given, in which case longer examples are an error."""
    longest, opt_len, single, too_long = 0, 1, True, 0
    for ex in examples:
        ctx, opts, _ = tokenize(task, tokenizer, ex)
        n = len(ctx) + max(len(o) for o in opts)
        longest = max(longest, n)
        opt_len = max(opt_len, max(len(o) for o in opts))
        single &= all(len(o) == 1 for o in opts)
        too_long += max_length is not None and n > max_length
    if max_length is None:
        max_length = multiple * math.ceil(longest / multiple)
    elif too_long:
        raise ValueError(f"{too_long} of {len(examples)} examples are longer than "
                         f"max_length={max_length} tokens (longest: {longest}); raise "
                         "--max-length or shorten the data.")
    return Layout(max_length=max_length, option_length=opt_len, single_token=single)


def encode(task, tokenizer: Tokenizer, examples: Sequence[Any], layout: Layout, *,
           fast_path: bool | None = None, only_correct: bool = False) -> dict[str, np.ndarray]:
    """Fixed-shape arrays for ``examples``.

    Returns a dict of NumPy arrays with a leading example axis ``N``:
    ``tokens [N, R, L]`` (``R`` sequences per example), ``row [N, C]`` (which sequence
    scores candidate ``c``), ``pos``/``tgt``/``mask`` ``[N, C, O]`` (positions whose
    prediction scores option token ``o``, its id, and whether it exists), ``label [N]``
    and ``weight [N]`` (1; padding examples get 0). ``fast_path`` (default: when the
    layout says every option is one token) puts the context alone in one sequence.
    ``only_correct`` keeps only the correct candidate (``C = 1``, label 0): all that the
    option-LM training loss needs.
    """
    fast = layout.single_token if fast_path is None else fast_path
    if fast and not layout.single_token:
        raise ValueError("The single-token fast path needs every option to be one token.")
    n = len(examples)
    if n == 0:
        raise ValueError("No examples to encode.")
    c = 1 if only_correct else len(task.options(examples[0]))
    r = 1 if (fast or only_correct) else c
    length, opt_len = layout.max_length, layout.option_length
    tokens = np.full((n, r, length), tokenizer.pad_id, np.int32)
    row = np.zeros((n, c), np.int32)
    pos = np.zeros((n, c, opt_len), np.int32)
    tgt = np.zeros((n, c, opt_len), np.int32)
    mask = np.zeros((n, c, opt_len), np.float32)
    label = np.zeros((n,), np.int32)
    for i, ex in enumerate(examples):
        ctx, opts, y = tokenize(task, tokenizer, ex)
        if only_correct:
            opts, y = [opts[y]], 0
        if len(opts) != c:
            raise ValueError(f"Example {i} has {len(opts)} options, expected {c}.")
        label[i] = y
        for j, opt in enumerate(opts):
            seq = ctx if fast else ctx + opt
            if len(ctx) + len(opt) > length or len(opt) > opt_len:
                raise ValueError(f"Example {i} ({len(ctx)} + {len(opt)} tokens) does not fit "
                                 f"{layout}.")
            k = 0 if fast else j
            tokens[i, k, : len(seq)] = seq
            row[i, j] = k
            m = len(opt)
            pos[i, j, :m] = len(ctx) - 1 + np.arange(m)
            tgt[i, j, :m] = opt
            mask[i, j, :m] = 1.0
    return {"tokens": tokens, "row": row, "pos": pos, "tgt": tgt, "mask": mask, "label": label,
            "weight": np.ones((n,), np.float32)}


def take(encoded: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """The examples at ``index`` (a batch)."""
    return {k: v[index] for k, v in encoded.items()}


def eval_batches(encoded: dict[str, np.ndarray], batch_size: int):
    """Fixed-size batches covering every example once; the last is padded with weight 0."""
    n = len(encoded["label"])
    for start in range(0, n, batch_size):
        index = np.arange(start, start + batch_size)
        valid = index < n
        batch = take(encoded, np.where(valid, index, 0))
        batch["weight"] = batch["weight"] * valid
        yield batch


# ---------------------------------------------------------------- scoring (JAX)


def option_scores(model, batch: dict[str, jax.Array], first: int = 0) -> jax.Array:
    """Mean log-probability of each candidate's option tokens, ``[B, C]`` float32.

    With ``first > 0`` the batch carries ``states`` ``[B, R, L, D]``, the cached residual
    stream entering layer ``first`` (:func:`cache_states`), and only the layers from
    ``first`` on are computed.
    """
    tokens = batch["tokens"]
    b, r, length = tokens.shape
    if first and r == 1 and batch["pos"].shape[-1] == 1:
        # One sequence scored at one position (the fast path): the last layer runs there only.
        hs = model.hidden_at(batch["states"][:, 0], first, batch["pos"][:, 0, 0])
        hs = jnp.broadcast_to(hs[:, None, None, :], (*batch["pos"].shape, hs.shape[-1]))
        return _mean_logp(model, hs, batch)
    if first:
        h = model.hidden_from(batch["states"].reshape(b * r, length, -1), first)
    else:
        h = model.hidden(tokens.reshape(b * r, length))  # [B*R, L, D]
    seq = jnp.arange(b)[:, None, None] * r + batch["row"][:, :, None]  # [B, C, 1]
    return _mean_logp(model, h[seq, batch["pos"]], batch)  # [B, C, O, D]


def _mean_logp(model, hs: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean log-probability of the option tokens from their hidden states ``[B, C, O, D]``."""
    logp = jax.nn.log_softmax(model.logits(hs).astype(jnp.float32), axis=-1)
    tok = jnp.take_along_axis(logp, batch["tgt"][..., None], axis=-1)[..., 0]
    mask = batch["mask"]
    return jnp.sum(tok * mask, -1) / jnp.maximum(jnp.sum(mask, -1), 1.0)


def example_losses(scores: jax.Array, label: jax.Array, kind: str) -> jax.Array:
    """Per-example loss ``[B]``: candidate cross-entropy or the correct option's NLL."""
    picked = jnp.take_along_axis(scores, label[:, None], axis=1)[:, 0]
    if kind == "classification":
        return jax.nn.logsumexp(scores, axis=1) - picked
    if kind == "option_lm":
        return -picked
    raise ValueError(f"Unknown loss kind {kind!r}; expected one of {LOSS_KINDS}.")


def batch_loss(model, batch: dict[str, jax.Array], kind: str, first: int = 0) -> jax.Array:
    """Weighted mean loss of a batch (the zeroth-order objective)."""
    losses = example_losses(option_scores(model, batch, first), batch["label"], kind)
    w = batch["weight"]
    return jnp.sum(losses * w) / jnp.maximum(jnp.sum(w), 1.0)


def batch_metrics(model, batch: dict[str, jax.Array], kind: str,
                  first: int = 0) -> dict[str, jax.Array]:
    """Sums over a batch: ``loss``, ``correct``, ``count`` (weights) and ``margin`` (the
    per-example score difference of candidates 1 and 0, for calibration)."""
    scores = option_scores(model, batch, first)
    w = batch["weight"]
    losses = example_losses(scores, batch["label"], kind)
    correct = (jnp.argmax(scores, axis=1) == batch["label"]).astype(jnp.float32)
    return {"loss": jnp.sum(losses * w), "correct": jnp.sum(correct * w), "count": jnp.sum(w),
            "margin": scores[:, -1] - scores[:, 0]}


def cache_states(hidden_below, encoded: dict[str, np.ndarray], first: int,
                 batch_size: int = 16) -> dict[str, np.ndarray]:
    """``encoded`` plus ``states`` ``[N, R, L, D]``: ``hidden_below(tokens, first)`` of every
    sequence, computed once (the frozen layers below the first tuned one)."""
    tokens = encoded["tokens"]
    n, r, length = tokens.shape
    flat = tokens.reshape(n * r, length)
    parts = [np.asarray(hidden_below(flat[i : i + batch_size], first))
             for i in range(0, n * r, batch_size)]
    return {**encoded, "states": np.concatenate(parts).reshape(n, r, length, -1)}


def encode_splits(cfg, splits: Splits, tokenizer, prompt: str):
    """``(layout, {train, dev, test: encoded})`` of ``splits`` with ``prompt``. The length
    fits the prompt when the embedded reviews were filtered by length, else ``max_length``."""
    task = get_task(cfg.task, prompt if cfg.task == "sst2" else None, splits.train)
    filtered = cfg.data is None and cfg.task == "sst2"
    layout = measure(task, tokenizer, splits.train + splits.dev + splits.test,
                     max_length=None if filtered else cfg.max_length)
    fast = layout.single_token and cfg.fast_path
    return layout, {
        name: encode(task, tokenizer, getattr(splits, name), layout, fast_path=fast,
                     only_correct=name == "train" and task.loss_kind == "option_lm")
        for name in ("train", "dev", "test")}
