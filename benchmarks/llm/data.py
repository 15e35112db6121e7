"""Data: loaders for the sentiment and COPA formats, the MeZO splits, synthetic sets.

* Movie-review snippets with human ratings (Hutto and Gilbert 2014, shipped in the
  vaderSentiment source distribution): ``id<TAB>rating<TAB>sentence``; label = sign of
  the rating, zeros dropped. Same Rotten Tomatoes source as SST.
* GLUE SST-2: ``train.tsv`` / ``dev.tsv`` with a ``sentence<TAB>label`` header.
* SuperGLUE COPA: ``train.jsonl`` / ``val.jsonl`` with premise, choice1, choice2,
  question (cause/effect) and label.

Splits follow MeZO (``large_models``): train and dev are drawn from the training split
by one seeded permutation (1000 / 500, COPA 1000 / 100, train shrunk to what is left),
test is the validation split (up to 1000). A single-file source (the movie reviews) is
cut into disjoint train / dev / test by the same permutation.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True)
class SentimentExample:
    sentence: str
    label: int  # 0 negative, 1 positive


@dataclasses.dataclass(frozen=True)
class CopaExample:
    premise: str
    choice1: str
    choice2: str
    question: str  # "cause" or "effect"
    label: int  # 0 -> choice1, 1 -> choice2


@dataclasses.dataclass(frozen=True)
class Splits:
    train: list
    dev: list
    test: list
    source: str

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "dev": len(self.dev), "test": len(self.test)}


def _lines(path: Path, what: str) -> list[tuple[int, str]]:
    """The non-blank lines of the ``what`` file ``path`` with their numbers (from 1)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} does not exist.")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(n, line) for n, line in enumerate(lines, 1) if line.strip()]


def load_movie_reviews(path: Path) -> list[SentimentExample]:
    """The movie-review snippets: label = rating > 0, ratings of exactly 0 dropped."""
    out = []
    for n, line in _lines(path, "Movie-review"):
        parts = line.rstrip("\r").split("\t")
        if len(parts) < 3:
            raise ValueError(f"{path}:{n}: expected 'id<TAB>rating<TAB>sentence', got "
                             f"{line[:60]!r}.")
        try:
            rating = float(parts[1])
        except ValueError:
            raise ValueError(f"{path}:{n}: rating {parts[1]!r} is not a number.") from None
        if rating != 0:
            out.append(SentimentExample("\t".join(parts[2:]).strip(), int(rating > 0)))
    if not out:
        raise ValueError(f"{path} holds no rated sentences.")
    return out


def load_sst2_tsv(path: Path) -> list[SentimentExample]:
    """A GLUE SST-2 TSV file with ``sentence`` and ``label`` columns."""
    lines = _lines(path, "SST-2")
    if not lines:
        raise ValueError(f"{path} is empty.")
    header = lines[0][1].split("\t")
    if "sentence" not in header or "label" not in header:
        raise ValueError(f"{path}: header {header} lacks 'sentence' and 'label' columns "
                         "(GLUE's test.tsv has no labels; use train.tsv and dev.tsv).")
    si, li = header.index("sentence"), header.index("label")
    out = []
    for n, line in lines[1:]:
        parts = line.split("\t")
        if len(parts) != len(header) or parts[li] not in ("0", "1"):
            raise ValueError(f"{path}:{n}: malformed SST-2 row {line[:60]!r}.")
        out.append(SentimentExample(parts[si].strip(), int(parts[li])))
    return out


def load_copa_jsonl(path: Path) -> list[CopaExample]:
    out = []
    for n, line in _lines(path, "COPA"):
        try:
            row = json.loads(line)
            ex = CopaExample(row["premise"], row["choice1"], row["choice2"], row["question"],
                             int(row["label"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}:{n}: not a COPA record ({err}).") from None
        if ex.question not in ("cause", "effect") or ex.label not in (0, 1):
            raise ValueError(f"{path}:{n}: question must be cause/effect and label 0/1.")
        out.append(ex)
    return out


def mezo_splits(train_pool: Sequence, test_pool: Sequence, *, n_train: int, n_dev: int,
                n_test: int, seed: int, source: str) -> Splits:
    """Dev then train from one seeded permutation of ``train_pool``; test from ``test_pool``."""
    if len(train_pool) <= n_dev:
        raise ValueError(f"{source}: {len(train_pool)} training examples cannot give {n_dev} "
                         "dev ones.")
    order = np.random.default_rng(seed).permutation(len(train_pool))
    dev = [train_pool[i] for i in order[:n_dev]]
    train = [train_pool[i] for i in order[n_dev : n_dev + n_train]]
    return Splits(train=train, dev=dev, test=list(test_pool)[:n_test], source=source)


def single_pool_splits(pool: Sequence, *, n_train: int, n_dev: int, n_test: int, seed: int,
                       source: str) -> Splits:
    """Disjoint test, dev and train (in that order) from one seeded permutation."""
    if len(pool) < n_test + n_dev + 1:
        raise ValueError(f"{source}: {len(pool)} examples are too few for {n_test} test + "
                         f"{n_dev} dev.")
    order = np.random.default_rng(seed).permutation(len(pool))
    test = [pool[i] for i in order[:n_test]]
    dev = [pool[i] for i in order[n_test : n_test + n_dev]]
    train = [pool[i] for i in order[n_test + n_dev : n_test + n_dev + n_train]]
    return Splits(train=train, dev=dev, test=test, source=source)


def load_splits(task: str, source: Path | str, *, n_train: int, n_dev: int, n_test: int,
                seed: int) -> Splits:
    """Splits of ``task`` from ``source``: a movie-review file, a GLUE SST-2 folder or a
    SuperGLUE COPA folder."""
    source = Path(source)
    sizes = dict(n_train=n_train, n_dev=n_dev, n_test=n_test, seed=seed)
    if task == "sst2" and source.is_dir():
        return mezo_splits(load_sst2_tsv(source / "train.tsv"), load_sst2_tsv(source / "dev.tsv"),
                           **sizes, source=f"GLUE SST-2 ({source})")
    if task == "sst2":
        return single_pool_splits(load_movie_reviews(source), **sizes,
                                  source=f"movie-review snippets ({source.name})")
    if task == "copa":
        if not source.is_dir():
            raise FileNotFoundError(
                f"COPA data must be a folder with train.jsonl and val.jsonl, got {source}.")
        return mezo_splits(load_copa_jsonl(source / "train.jsonl"),
                           load_copa_jsonl(source / "val.jsonl"), **sizes,
                           source=f"SuperGLUE COPA ({source})")
    raise ValueError(f"Unknown task {task!r}; expected 'sst2' or 'copa'.")


# ---------------------------------------------------------------- synthetic data (tests, smoke)

POSITIVE = ["great", "wonderful", "moving", "funny", "brilliant", "charming", "sharp", "warm"]
NEGATIVE = ["dull", "boring", "clumsy", "tedious", "awful", "bland", "messy", "flat"]
NOUNS = ["film", "story", "cast", "script", "movie", "plot", "ending", "score"]
FILLERS = ["the", "a", "really", "quite", "and", "very", "this", "its"]


def synthetic_sentiment(n: int, seed: int = 0) -> list[SentimentExample]:
    """Short sentences whose label is carried by one adjective: learnable by tiny models."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        label = int(rng.integers(2))
        adj = rng.choice(POSITIVE if label else NEGATIVE)
        words = [rng.choice(FILLERS), rng.choice(NOUNS), "is", rng.choice(FILLERS), adj]
        out.append(SentimentExample(" ".join(words) + " .", label))
    return out


def synthetic_copa(n: int, seed: int = 0) -> list[CopaExample]:
    """Tiny cause/effect pairs in COPA's format."""
    rng = np.random.default_rng(seed)
    events = [("The man was tired.", "He went to sleep.", "He ran a race."),
              ("The glass fell.", "It broke.", "It sang."),
              ("It rained.", "The street got wet.", "The street got dry."),
              ("The girl was hungry.", "She ate lunch.", "She skipped lunch.")]
    out = []
    for _ in range(n):
        premise, right, wrong = events[int(rng.integers(len(events)))]
        label = int(rng.integers(2))
        c1, c2 = (wrong, right) if label else (right, wrong)
        out.append(CopaExample(premise, c1, c2, "effect", label))
    return out


def synthetic_splits(task: str, *, n_train: int, n_dev: int, n_test: int, seed: int = 0) -> Splits:
    if task not in ("sst2", "copa"):
        raise ValueError(f"Unknown task {task!r}; expected 'sst2' or 'copa'.")
    make = synthetic_sentiment if task == "sst2" else synthetic_copa
    return Splits(train=make(n_train, seed), dev=make(n_dev, seed + 1),
                  test=make(n_test, seed + 2), source=f"synthetic {task}")


def vocabulary(splits: Splits) -> list[str]:
    """All words (whitespace and punctuation split) of synthetic splits, for tiny tokenizers."""
    words = set()
    for ex in splits.train + splits.dev + splits.test:
        texts = ([ex.sentence] if isinstance(ex, SentimentExample)
                 else [ex.premise, ex.choice1, ex.choice2])
        for t in texts:
            words.update(re.findall(r"\w+|[^\w\s]", t))
    words.update(["It", "was", "terrible", "great", "because", "so"])
    words.update(w.lower() for w in list(words))
    return sorted(words)
