"""The attack config (:class:`Config`), its presets, and which attacks a protocol runs.

* ``paper``: test image 1 and the seeds 101, 202, 303, 404, 505 (the ZoAR code attacks
  test index 1; the ZoAQ paper reports mean and std over those five seeds).
* ``extended``: the first ``num_images`` (default 100) correctly classified test images,
  each with the same five seeds (500 attacks).
* ``smoke``: the paper's attack at seconds' size (one seed, ZoAQ and R-AdaZO, 200
  iterations) on a smoke-size target model (one epoch on 1,000 images), for tests and a
  first look.

Attacks are ordered image-major (all seeds of an image together). The same seed gives
the same :math:`x_0` and direction stream to every method (matched seeds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.attack import methods as methods_lib
from benchmarks.attack.data import Dataset
from benchmarks.attack.objective import GOALS
from benchmarks.attack.runner import AttackConfig

PROTOCOLS = ("paper", "extended", "smoke")
PAPER_IMAGE = 1
SEEDS = (101, 202, 303, 404, 505)


@dataclass(frozen=True)
class Config:
    """Everything an attack result depends on. The fields up to ``data`` are command-line
    options of the same name (``--trace-len`` sets ``trace_len``, see
    :func:`benchmarks.presets.from_args`); the command sets the others."""

    protocol: str  # one of PROTOCOLS
    methods: tuple[str, ...]  # method specs
    width: int  # lanes per vmapped batch
    trace_len: int  # iterations of loss/consistency traces kept per attack
    seeds: tuple[int, ...] = SEEDS
    images: int = 100  # correctly classified test images (extended protocol)
    steps: int = 20_000  # iteration cap
    chunk: int = 50  # iterations between refills
    epochs: int = 15  # training epochs of the target model
    train_images: int | None = None  # the model's training images, the first N (None: all)
    dataset: str = "mnist"
    data: str | None = None  # full MNIST or CIFAR-10 files (None: the 5k MNIST subset)
    goals: tuple[str, ...] = GOALS  # the goals a command runs, a config each
    goal: str = "targeted"  # this config's goal
    weights: str = ""  # the target model's cached weight file
    attacks: tuple[tuple[int, int], ...] = ()  # (test image, seed) of each attack run

    @property
    def attack_config(self) -> AttackConfig:
        return AttackConfig(max_steps=self.steps, width=self.width, chunk=self.chunk,
                            trace_len=self.trace_len)


PRESETS = {
    "paper": Config("paper", methods_lib.ALL_METHODS, width=32, trace_len=2000),
    "extended": Config("extended", methods_lib.PAPER_METHODS, width=16, trace_len=0),
    "smoke": Config("smoke", ("zoaq", "radazo"), width=2, trace_len=50, seeds=SEEDS[:1],
                    steps=200, epochs=1, train_images=1000, goals=("targeted",))}


def select(protocol: str, dataset: Dataset, predictions: np.ndarray,
           seeds: tuple[int, ...] = SEEDS, num_images: int = 100) -> tuple[tuple[int, int], ...]:
    """The ``(test image, seed)`` of every attack of ``protocol`` on ``dataset``'s test
    split, each image with every seed (``predictions``: the target model's class of every
    test image).

    Raises:
      ValueError: unknown protocol, no seeds, or too few test images.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"Unknown protocol {protocol!r}; choose one of {PROTOCOLS}.")
    if not seeds:
        raise ValueError("At least one seed is needed.")
    labels = dataset.test_labels
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions must be shaped {labels.shape}, got {predictions.shape}.")
    if protocol in ("paper", "smoke"):
        if len(labels) <= PAPER_IMAGE:
            raise ValueError(f"The paper protocol attacks test image {PAPER_IMAGE}; the test "
                             f"split has only {len(labels)} images.")
        images = np.array([PAPER_IMAGE])
    else:
        if num_images < 1:
            raise ValueError(f"num_images must be >= 1, got {num_images}.")
        images = np.flatnonzero(predictions == labels)[:num_images]
        if len(images) < num_images:
            raise ValueError(f"Only {len(images)} correctly classified test images, "
                             f"{num_images} requested.")
    return tuple((int(image), int(seed)) for image in images for seed in seeds)
