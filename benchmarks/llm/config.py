"""The LLM benchmark's configuration: one frozen dataclass and its presets.

Presets:
  smoke    tiny random LLaMA on synthetic data, R-AdaZO and ZoAQ: under a minute (CI).
  cpu      SmolLM2-135M-Instruct on the movie-review snippets (snippets that fit in 32
           tokens with MeZO's prompt), the prompt chosen on dev accuracy from
           tasks.PROMPTS (``review``: "Review: <s>\nSentiment:" negative/positive), LoRA
           on the top layer only (the 29 layers below are computed once per example and
           cached; the last layer runs at the scored position only), learning rate from
           a dev sweep (see docs/results/llm.md), 3 seeds, equal-query (anytime) mode:
           every method spends CPU_BUDGET FE; fixed K in {1, 2, 4}, ZoAQ and auto_k;
           then the baselines (zero-shot per prompt raw and calibrated, demonstrations,
           linear probe, backprop + Adam with the same compute in forward-pass time,
           evaluated as often, its learning rate chosen on dev) and the memory table.
           Measured: 14 min per seed (5 methods, model loading included) on 2 shared
           CPU cores; about 45 min for 3 seeds before the baselines.
  mezo_cpu the previous cpu preset: MeZO's "<s> It was" terrible/great prompt, LoRA on
           every layer, the paper's lr 5e-5, 100 steps, one seed (does not learn: the
           prompt starts below chance on dev, see issue 22).
  paper    the paper's protocol: 5,000 steps, eval every 250, 1000/500/1000 examples,
           3 seeds, every method of the paper's table (and ``statzo_norm``, the StatZO
           rule the paper writes down). Meant for a GPU; the same code runs on CPU
           (tests run it on a tiny model). SmolLM2 by default, OPT with
           ``--model opt:PATH``.
  anytime  the mezo_cpu preset's model and data in anytime mode: every method spends the same
           budget of 144 FE (R-AdaZO K=4 runs 18 steps, K=1 72), dev loss every 24 FE on
           100 dev examples; fixed K in {1, 2, 4} give the envelope, and the report gives
           the query regret of each method (see experiment.regret).

Every field can be overridden by the option named like it (``--steps``, ``--n-dev``,
``--lr``, ...; :func:`benchmarks.presets.from_args`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from benchmarks.llm.methods import DEFAULT

COPA_DEV = 100  # MeZO's COPA dev size


@dataclass(frozen=True)
class Config:
    """Everything a run depends on (the seeds and methods included).

    Runs end after ``steps`` steps, evaluating every ``eval_every`` steps; or, with
    ``budget`` (anytime mode), at the first step whose FE reach it, evaluating at the
    first step whose FE reach each multiple of ``eval_every_fe`` (default ``budget // 8``).
    """

    model: str  # smollm2 | gguf:PATH | opt:PATH | hf:PATH | tiny-llama | tiny-opt
    steps: int
    eval_every: int  # steps between dev evaluations
    batch_size: int
    n_train: int
    n_dev: int
    n_test: int
    seeds: tuple[int, ...] = (0,)
    max_length: int | None = None  # tokens; None: fit the data
    eval_batch_size: int = 16
    probe_every: int = 10  # train-loss probe period (steps)
    timing_reps: int = 3
    methods: tuple[str, ...] = DEFAULT  # method specs (benchmarks.llm.methods)
    budget: int | None = None  # anytime mode: FE each method spends (steps unused)
    eval_every_fe: int | None = None  # anytime mode: dev loss period in FE
    lr: float = 5e-5  # the paper's learning rate
    mu: float = 1e-2  # the paper's perturbation scale
    task: str = "sst2"  # sst2 | copa
    data: str | None = None  # None: the embedded movie reviews; "synthetic"; a folder/file
    data_seed: int = 0  # seed of the split permutation
    dtype: str = "float32"  # storage dtype of the frozen base weights (LoRA is float32)
    fast_path: bool = True  # score single-token options from one sequence
    prompt: str = "it_was"  # sst2 prompt (tasks.PROMPTS); MeZO's by default
    lora_layers: int | None = None  # LoRA on the top n layers, the rest cached; None: all
    lora_rank: int | None = None  # LoRA rank, alpha / rank = 2 at any rank; None: MeZO's 8
    sequential: bool = False  # evaluate the 2K perturbations one by one (zoaq_jax.sequential)
    baselines: bool = False  # prompt list, linear probe, first-order reference, memory
    # Adam's learning rates of the first-order reference (chosen on dev)
    first_order_lrs: tuple[float, ...] = (1e-4, 3e-4, 1e-3)

    def __post_init__(self):
        if self.budget is not None and self.eval_every_fe is None:
            object.__setattr__(self, "eval_every_fe", default_eval_every_fe(self.budget))
        names = ["steps", "eval_every", "batch_size", "eval_batch_size", "probe_every"]
        for name in names + (["budget", "eval_every_fe"] if self.budget is not None else []):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")

    def done(self, t: int, fe: int) -> bool:
        """Whether the run ends after step ``t`` with ``fe`` FE spent."""
        return t >= self.steps if self.budget is None else fe >= self.budget

    @property
    def evaluations(self) -> int:
        """Dev evaluations of a run after the one before its first step: one per period of
        ``eval_every_fe`` FE (anytime mode) or ``eval_every`` steps, the last one at the end."""
        if self.budget is None:
            return -(-self.steps // self.eval_every)
        return -(-self.budget // self.eval_every_fe)

    def eval_due(self, t: int, fe_before: int, fe: int) -> bool:
        """Whether step ``t`` (FE ``fe_before`` -> ``fe``) is followed by an evaluation."""
        if self.budget is None:
            return t % self.eval_every == 0 or self.done(t, fe)
        return fe // self.eval_every_fe > fe_before // self.eval_every_fe or self.done(t, fe)


def default_eval_every_fe(budget: int) -> int:
    """Anytime mode's evaluation period without ``eval_every_fe``: an eighth of the budget."""
    return max(1, budget // 8)


SMOKE = Config(model="tiny-llama", steps=12, eval_every=6, batch_size=4, n_train=32, n_dev=8,
               n_test=8, eval_batch_size=8, probe_every=3, timing_reps=1, data="synthetic",
               methods=("radazo", "zoaq"))
MEZO_CPU = Config(model="smollm2", steps=100, eval_every=20, batch_size=16, n_train=1000,
                  n_dev=200, n_test=400, max_length=32,
                  methods=("radazo", "statzo", "zoaq", "zoaq:k_max=2"))
CPU_BUDGET = 6000  # FE per method and seed
CPU = dataclasses.replace(
    MEZO_CPU, seeds=(0, 1, 2), prompt="review", lora_layers=1, lr=1e-3, budget=CPU_BUDGET,
    eval_every_fe=CPU_BUDGET // 8, timing_reps=1, baselines=True,
    methods=("radazo:k=1", "radazo:k=2", "radazo", "zoaq", "auto_k"))
PAPER = Config(model="smollm2", steps=5000, eval_every=250, batch_size=16, n_train=1000,
               n_dev=500, n_test=1000, seeds=(0, 1, 2), methods=DEFAULT + ("statzo_norm",))
ANYTIME = dataclasses.replace(
    MEZO_CPU, n_dev=100, n_test=100, timing_reps=1, budget=144, eval_every_fe=24,
    methods=("radazo:k=1", "radazo:k=2", "radazo", "auto_k", "zoaq:k_max=2", "zoaq"))

PRESETS = {"smoke": SMOKE, "cpu": CPU, "mezo_cpu": MEZO_CPU, "paper": PAPER, "anytime": ANYTIME}


def complete(config: Config, *, n_dev_given: bool = False) -> Config:
    """The derived default: MeZO's 100 COPA dev examples on real COPA data unless
    ``--n-dev`` was given."""
    if config.task == "copa" and config.data != "synthetic" and not n_dev_given:
        config = dataclasses.replace(config, n_dev=COPA_DEV)
    return config
