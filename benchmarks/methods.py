"""One method registry for every benchmark, with one spec grammar.

A method is named by a spec ``BASE`` or ``BASE:key=value,key=value``: ``zoaq``,
``radazo:k=4``, ``zoaq:n_hist=4,reset=half``, ``zoaq:tau_band=(-0.2,0.5)``,
``statzo:backbone=zo_adamm``. The bases are the library's estimators; a key is any number-
or string-valued argument of the base's estimator (read from its signature), one of ZoAQ's
ablation keys (:data:`ZOAQ_ABLATIONS`, translated to the library's policy objects by
:func:`zoaq_policies`), ``backbone`` (``radazo``, ``zo_adamm``, ``sgd``, or one of Optax's
parameter-free optimizers :data:`PARAMETER_FREE`: ``prodigy``, ``dog``, ``dowg``, which set
their own step size) or one of the keys every base takes (:data:`COMMON`): ``lr_scale``
(a multiplier of the benchmark's learning rate: ``radazo:k=4,lr_scale=2``) and
``schedule`` (``constant``; ``cosine``: a cosine decay of the learning rate to 0 over the
run's call budget; ``plateau``: ``optax.contrib.reduce_on_plateau`` driven by the
estimator's free value estimate). Each
benchmark keeps only its own defaults (a :class:`Registry`: the paper's settings for that
experiment); the spec's canonical text lists the keys that differ from them, sorted, so
one method has one name in every record.

An ablation is also written as in the library: ZoAQ's policy arguments ``gate``,
``budget`` and ``retention`` take the library's value as Python writes it
(``zoaq:budget=budgets.reset("half")`` is ``zoaq_jax.zoaq_estimator(
budget=zoaq_jax.budgets.reset("half"))``), and :func:`policy_keys` turns it into the ablation keys, so both spellings
name one method (canonical ``zoaq:reset=half``).

Every method is built the same way (:meth:`Method.build`)::

    optax.chain(estimator, monitor_consistency(b1), backbone, [add_decayed_weights],
                scale_by_learning_rate(lr x lr_scale, or its schedule), [reduce_on_plateau])

(a parameter-free backbone ends the chain: ``learning_rate=lr_scale`` is its own
multiplier);
the consistency monitor records ``cos(g_t, m_{t-1})`` for any estimator and leaves the
updates unchanged.

Example:
  >>> from benchmarks.methods import Hyper, Registry
  >>> registry = Registry({"zoaq": {"k_max": 10}, "radazo": {"k": 10}})
  >>> method = registry.parse("zoaq:n_hist=4")
  >>> method.spec, method.label
  ('zoaq:n_hist=4', 'ZoAQ K∈[1,10], n_hist=4')
  >>> registry.parse("radazo").label
  'R-AdaZO K=10'

Beside the library's methods, :data:`EXTERNAL` names the methods of other libraries a
benchmark runs as references (evosax's ``Open_ES`` and a hand-written PyTorch loop in the
speed benchmark), and :data:`SYNTHETIC` / :data:`SYNTHETIC_HYPER` are the synthetic
benchmark's defaults, which the benchmarks on its objectives share (synthetic,
generalization, overhead).
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import optax

import zoaq_jax
from benchmarks import flags


# ZoAQ's ablations as the spec grammar names them (in stored results and page commands),
# with their defaults; the library takes policy objects instead (zoaq_policies).
ZOAQ_ABLATIONS = {"reset": "min", "trigger": "cosine", "c_norm": None, "tau_band": None,
                  "controller": "adaptive"}
POLICIES = ("gate", "budget", "retention")  # zoaq_estimator's policy arguments
COMMON = {"lr_scale": 1.0, "schedule": "constant"}  # keys of every base (module docstring)
SCHEDULES = ("constant", "cosine", "plateau")
# Optax's parameter-free optimizers (complete: they scale their own steps), at their defaults.
PARAMETER_FREE = {"prodigy": "Prodigy", "dog": "DoG", "dowg": "DoWG"}
BACKBONES = {"radazo": "R-AdaZO", "zo_adamm": "ZO-AdaMM", "sgd": "SGD", **PARAMETER_FREE}
POLICY_MODULES = {"gates": zoaq_jax.gates, "budgets": zoaq_jax.budgets,
                  "retention": zoaq_jax.retention}


def policy_keys(argument: str, text: str) -> dict[str, Any]:
    """The ablation keys of a ZoAQ policy written as in the library.

    ``text`` is a call of a policy factory as Python writes it, with or without the
    ``zoaq_jax.`` prefix and with literal arguments: ``budgets.reset("half")`` (``reset``),
    ``gates.momentum(tau0=0.0)`` and ``gates.momentum_norm(c_norm=0.3)`` (``trigger`` and
    the gate's settings), ``gates.accept(gates.momentum())`` (``controller=always_accept``),
    ``retention.fifo(4, reuse_after_expand=False)`` (``n_hist``,
    ``controller=fresh_on_expand``). Arguments not written keep the benchmark's defaults;
    ``b1`` is the benchmark's (its ``Hyper``).

    Example:
      >>> policy_keys("gate", "zoaq_jax.gates.accept(zoaq_jax.gates.momentum(tau0=0.0))")
      {'tau0': 0.0, 'trigger': 'cosine', 'controller': 'always_accept'}
    """
    def call(node: ast.AST) -> tuple[str, dict[str, Any]]:
        """``(module.factory, {argument: value})`` of a factory call."""
        name = ast.unparse(node.func).removeprefix("zoaq_jax.") if isinstance(
            node, ast.Call) else ""
        module, _, factory = name.partition(".")
        if module not in POLICY_MODULES or factory not in POLICY_MODULES[module].__all__:
            raise ValueError(f"{argument}={text!r}: expected a call of a factory of "
                             "zoaq_jax.gates, zoaq_jax.budgets or zoaq_jax.retention")
        literal = ast.literal_eval if name != "gates.accept" else lambda n: call(n)
        try:
            args = inspect.signature(getattr(POLICY_MODULES[module], factory)).bind(
                *map(literal, node.args), **{k.arg: literal(k.value) for k in node.keywords})
        except (TypeError, ValueError) as error:
            raise ValueError(f"{argument}={text!r}: {error}") from None
        return name, dict(args.arguments)

    try:
        name, given = call(ast.parse(text, mode="eval").body)
    except SyntaxError:
        raise ValueError(f"{argument}={text!r} is not a Python expression") from None
    keys: dict[str, Any] = {}
    if name == "gates.accept":
        if "gate" in given:
            name, given = given["gate"]
            keys["controller"] = "always_accept"
        else:  # the gate with no state, not an ablation of the momentum gate
            name = "gates.accept()"
    if "b1" in given:
        raise ValueError(f"{argument}={text!r}: b1 is the benchmark's (its Hyper), not a "
                         "spec key")
    translated = {
        ("budget", "budgets.reset"): lambda: {"reset": given.get("kind", "min")},
        ("gate", "gates.momentum"): lambda: {**given, "trigger": "cosine"},
        ("gate", "gates.momentum_norm"): lambda: {**given, "trigger": "norm"},
        ("retention", "retention.fifo"): lambda: {
            **{k: v for k, v in given.items() if k != "reuse_after_expand"},
            **({"controller": "fresh_on_expand"}
               if given.get("reuse_after_expand") is False else {})},
    }
    if (argument, name) not in translated:
        raise ValueError(f"{argument}={text!r}: {name} has no spec spelling; the spec's "
                         "ZoAQ ablations are budgets.reset, gates.momentum, "
                         "gates.momentum_norm, gates.accept and retention.fifo")
    return {**translated[argument, name](), **keys}


def zoaq_policies(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``zoaq_estimator``'s arguments for a spec's: the ablation keys become policies.

    ``trigger=norm`` (with ``c_norm``) is ``gates.momentum_norm``, ``tau_band`` a projected
    ``gates.momentum``, ``controller=always_accept`` wraps the gate in ``gates.accept``,
    ``controller=fresh_on_expand`` is ``retention.fifo(..., reuse_after_expand=False)``
    and ``reset`` is ``budgets.reset``.
    """
    kw = dict(kwargs)
    reset, trigger, c_norm, tau_band, controller = (kw.pop(k) for k in ZOAQ_ABLATIONS)
    if trigger not in ("cosine", "norm") or controller not in (
            "adaptive", "always_accept", "fresh_on_expand"):
        raise ValueError(f"unknown trigger={trigger!r} or controller={controller!r}")
    given = {"b1": kw.pop("b1")} if "b1" in kw else {}  # else the gate's default
    if trigger == "norm":
        if tau_band is not None:
            raise ValueError("tau_band bounds the cosine threshold; the norm trigger has none.")
        if c_norm is not None:
            given["c_norm"] = c_norm
        gate = zoaq_jax.gates.momentum_norm(eps_anc=kw.pop("eps_anc"), **given)
        kw.pop("tau0"), kw.pop("beta_tau")
    elif c_norm is not None:
        raise ValueError("c_norm is the norm trigger's tolerance; pass trigger=norm to use it.")
    else:
        gate = zoaq_jax.gates.momentum(tau0=kw.pop("tau0"), beta_tau=kw.pop("beta_tau"),
                                       eps_anc=kw.pop("eps_anc"), tau_band=tau_band, **given)
    if controller == "always_accept":
        gate = zoaq_jax.gates.accept(gate)
    retention = zoaq_jax.retention.fifo(kw.pop("n_hist"), refresh=kw.pop("refresh"),
                                        reuse_after_expand=controller != "fresh_on_expand")
    return {**kw, "gate": gate, "budget": zoaq_jax.budgets.reset(reset),
            "retention": retention}


@dataclass(frozen=True)
class Base:
    """A family of methods: the library estimator, its fixed arguments, its backbone."""

    name: str  # in the paper's notation
    estimator: Callable[..., optax.GradientTransformationExtraArgs]
    backbone: str = "radazo"
    fixed: tuple[tuple[str, Any], ...] = ()  # estimator arguments the base pins
    fixed_budget: bool = False  # K constant, fresh directions: a fixed-K family
    # policy factories whose settings are spec keys, and the function that turns a spec's
    # keyword arguments into the estimator's (its policies built from those settings)
    settings: tuple[Callable[..., Any], ...] = ()
    policies: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @property
    def ablations(self) -> dict[str, Any]:
        """The spec's string-valued ablation keys of this base (ZoAQ's), with defaults."""
        return ZOAQ_ABLATIONS if self.estimator is zoaq_jax.zoaq_estimator else {}

    def arguments(self) -> dict[str, Any]:
        """The estimator's tunable arguments and their library defaults."""
        pinned = {k for k, _ in self.fixed} | {"mu", "key", "b1", "reuse_after_expand",
                                               *POLICIES}
        params = {n: p.default for f in (self.estimator, *self.settings)
                  for n, p in inspect.signature(f).parameters.items()}
        return {name: default for name, default in {**params, **self.ablations}.items()
                if name not in pinned}


def progress_policy(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``auto_k_estimator``'s arguments for a spec's: the rule's settings become
    ``budget=budgets.progress(...)``."""
    rule = inspect.signature(zoaq_jax.budgets.progress).parameters
    kw = dict(kwargs)
    budget = zoaq_jax.budgets.progress(**{n: kw.pop(n) for n in rule})
    return {**kw, "budget": budget}


ZOAQ_SETTINGS = (zoaq_jax.gates.momentum, zoaq_jax.retention.fifo)

BASES: dict[str, Base] = {
    "zoaq": Base("ZoAQ", zoaq_jax.zoaq_estimator, settings=ZOAQ_SETTINGS,
                 policies=zoaq_policies),
    "statzo": Base("StatZO", zoaq_jax.statzo_estimator),
    # The rule the ZoAQ paper writes for its stabilized StatZO: ||g - m|| / ||m|| <= c_norm
    # on fresh directions only.
    "statzo_norm": Base("StatZO-norm", zoaq_jax.zoaq_estimator,
                        fixed=(("trigger", "norm"), ("n_hist", 0)), settings=ZOAQ_SETTINGS,
                        policies=zoaq_policies),
    "auto_k": Base("auto_k", zoaq_jax.auto_k_estimator, settings=(zoaq_jax.budgets.progress,),
                   policies=progress_policy),
    "radazo": Base("R-AdaZO", zoaq_jax.fixed_estimator, fixed_budget=True),
    "zo_adamm": Base("ZO-AdaMM", zoaq_jax.fixed_estimator, backbone="zo_adamm",
                     fixed_budget=True),
    "mezo": Base("MeZO", zoaq_jax.fixed_estimator, backbone="sgd", fixed_budget=True),
    "zoar": Base("ZoAR", zoaq_jax.zoar_estimator),
    "hizoo": Base("HiZOO", zoaq_jax.hizoo_estimator, backbone="sgd"),
}


@dataclass(frozen=True)
class Hyper:
    """The settings a benchmark gives every method: learning rate, smoothing, moments."""

    lr: float
    mu: float
    b1: float = 0.9
    b2: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0  # decoupled weight decay before the learning rate (MeZO)


@dataclass(frozen=True)
class Method:
    """A parsed spec: its base and every parameter (the benchmark's defaults applied)."""

    spec: str  # canonical: BASE[:key=value,...] with the keys that differ from the defaults
    base: str
    params: tuple[tuple[str, Any], ...]  # every parameter, sorted by name
    changed: tuple[str, ...]  # the keys that differ from the benchmark's defaults
    names: tuple[tuple[str, str], ...] = ()  # the registry's label of a key: "N_hist={}"
    envelope: str | None = None  # the registry's envelope directions (None: any)

    def get(self, key: str) -> Any:
        return dict(self.params)[key]

    @property
    def k_min(self) -> int:
        """The smallest K a step can use (its K for a fixed-K method)."""
        p = dict(self.params)
        return p["k_min"] if "k_min" in p else p["k"]

    @property
    def k_max(self) -> int:
        """The largest K a step can use (its K for a fixed-K method)."""
        p = dict(self.params)
        return p["k_max"] if "k_max" in p else p["k"]

    @property
    def grid_k(self) -> int | None:
        """K of a method of a fixed-budget family (:attr:`Base.fixed_budget`) on a moment
        backbone at a constant learning rate (any ``lr_scale``), with the registry's
        envelope directions where it names them: a point of the (learning rate, K) grid;
        else ``None``. The project's one fixed-K test (:attr:`fixed_k` builds on it)."""
        p = dict(self.params)
        plain = p["schedule"] == "constant" and p["backbone"] not in PARAMETER_FREE
        family = BASES[self.base].fixed_budget and self.envelope in (None, p.get("directions"))
        return p["k"] if family and plain else None

    @property
    def fixed_k(self) -> int | None:
        """The budget of a fixed-budget method at the benchmark's learning rate (``None``
        for adaptive ones, and for a scaled, scheduled or parameter-free step)."""
        return self.grid_k if self.get("lr_scale") == 1.0 else None

    @property
    def label(self) -> str:
        """A human-readable name in the paper's notation: the keys that differ from the
        registry's defaults as ``key=value`` (or as the registry names them), a backbone
        other than the base's in brackets (``ZoAQ K∈[1,10], n_hist=4 (ZO-AdaMM)``). The
        project's one label."""
        p, names = dict(self.params), dict(self.names)
        budget = f"K={p['k']}" if "k" in p else f"K∈[{p['k_min']},{p['k_max']}]"
        extras = [names.get(k, f"{k}={{}}").format(p[k]) for k in self.changed
                  if k not in ("k", "k_min", "k_max", "backbone")]
        backbone = f" ({BACKBONES[p['backbone']]})" if "backbone" in self.changed else ""
        return (" ".join([BASES[self.base].name, budget]) + "".join(f", {e}" for e in extras)
                + backbone)

    def build(self, hyper: Hyper, key: Any, *, monitor: bool = True,
              budget: int | None = None) -> optax.GradientTransformationExtraArgs:
        """The optimizer chain of this method (see the module docstring).

        ``monitor=False`` leaves out the consistency monitor (the speed benchmark times
        the optimizer a user runs, the library alias's chain). ``budget``: the run's calls,
        which ``schedule=cosine`` decays over (required there).
        """
        base = BASES[self.base]
        p = dict(self.params)
        backbone, lr_scale, schedule = (p.pop(k) for k in ("backbone", *COMMON))
        kwargs = {**p, **dict(base.fixed), "mu": hyper.mu, "key": key}
        if base.ablations or "b1" in inspect.signature(base.estimator).parameters:
            kwargs["b1"] = hyper.b1
        if base.policies is not None:
            kwargs = base.policies(kwargs)
        parts = [base.estimator(**kwargs),
                 *([zoaq_jax.monitor_consistency(b1=hyper.b1)] if monitor else [])]
        if backbone in PARAMETER_FREE:
            if schedule != "constant":
                raise ValueError(f"schedule={schedule} needs a backbone with a learning rate, "
                                 f"not {backbone}")
            return optax.chain(*parts, getattr(optax.contrib, backbone)(learning_rate=lr_scale))
        parts.append(_backbone(backbone, hyper))
        if hyper.weight_decay:
            parts.append(optax.add_decayed_weights(hyper.weight_decay))
        lr = hyper.lr * lr_scale
        if schedule == "cosine":
            if budget is None or "k" not in p:
                raise ValueError("schedule=cosine decays over the run's budget: it needs a "
                                 "fixed K (k=) and the budget")
            steps = budget // (2 * p["k"] if p["difference"] == "central" else p["k"] + 1)
            lr = cosine_decay(lr, steps)
        chain = optax.chain(*parts, optax.scale_by_learning_rate(lr))
        return plateau_on_value(chain) if schedule == "plateau" else chain


def cosine_decay(lr, steps) -> Callable:
    """``optax.cosine_decay_schedule(lr, steps)`` (to 0) for a ``steps`` that may be traced
    (vmapped over several budgets): ``lr (1 + cos(pi min(t / steps, 1))) / 2``."""
    steps = jnp.maximum(steps, 1)
    return lambda count: lr * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count / steps, 1.0)))


def plateau_on_value(inner: optax.GradientTransformation,
                     ) -> optax.GradientTransformationExtraArgs:
    """``inner``, its updates scaled by ``optax.contrib.reduce_on_plateau`` (defaults) fed
    the free value estimate ``inner`` recorded (``optax.tree.get(state, "value_estimate")``:
    the estimate of ``f(x_t)`` at the step's point, no extra query)."""
    plateau = optax.contrib.reduce_on_plateau()
    inner = optax.with_extra_args_support(inner)

    def init(params):
        return inner.init(params), plateau.init(params)

    def update(updates, state, params=None, **extra):
        updates, inner_state = inner.update(updates, state[0], params, **extra)
        value = optax.tree.get(inner_state, "value_estimate")
        updates, plateau_state = plateau.update(updates, state[1], params, value=value)
        return updates, (inner_state, plateau_state)

    return optax.GradientTransformationExtraArgs(init, update)


def _backbone(name: str, hyper: Hyper) -> optax.GradientTransformation:
    if name == "sgd":
        return optax.identity()
    scale = {"radazo": zoaq_jax.scale_by_radazo, "zo_adamm": zoaq_jax.scale_by_zo_adamm}
    if name not in scale:
        raise ValueError(f"backbone must be radazo, zo_adamm, sgd or one of "
                         f"{', '.join(PARAMETER_FREE)}, got {name!r}")
    return scale[name](b1=hyper.b1, b2=hyper.b2, eps=hyper.eps)


class Registry:
    """The methods a benchmark offers: the bases it uses and its defaults for each.

    Args:
      defaults: ``{base: {key: value}}``; a base's keys not listed keep the library's
        defaults, ``backbone`` the base's own.
      names: how a label writes a changed key (``{"n_hist": "N_hist={}"}``; default
        ``key={}``).
      envelope: the directions of the fixed-K envelope's methods (``"gaussian"``: other
        direction families are scored against it, not part of it); ``None``: any.
    """

    def __init__(self, defaults: Mapping[str, Mapping[str, Any]], *,
                 names: Mapping[str, str] | None = None, envelope: str | None = None):
        self.names, self.envelope = tuple(sorted((names or {}).items())), envelope
        unknown = sorted(set(defaults) - set(BASES))
        if unknown:
            raise ValueError(f"unknown base(s) {unknown}; the bases are {sorted(BASES)}")
        self.defaults = {}
        for name, values in defaults.items():
            full = {**BASES[name].arguments(), "backbone": BASES[name].backbone, **COMMON}
            bad = sorted(set(values) - set(full))
            if bad:
                raise ValueError(f"{name} has no argument(s) {bad}")
            self.defaults[name] = {**full, **values}

    @property
    def bases(self) -> list[str]:
        return list(self.defaults)

    def parse(self, spec: str) -> Method:
        """Parses ``BASE`` or ``BASE:key=value,...``.

        Raises:
          ValueError: an unknown base or key, a value of the wrong type, a malformed spec.
        """
        base, _, rest = spec.strip().partition(":")
        if base not in self.defaults:
            raise ValueError(f"unknown method {base!r}; choose one of {', '.join(self.bases)} "
                             "(optionally with :key=value overrides, e.g. zoaq:n_hist=4)")
        defaults = self.defaults[base]
        params = dict(defaults)
        written: dict[str, str] = {}
        for item in flags.split(rest):
            name, eq, text = item.partition("=")
            given = ({name: text} if name not in POLICIES or not BASES[base].ablations
                     else {k: _text(v) for k, v in policy_keys(name, text).items()})
            for key, value in given.items():
                if not eq or key not in params:
                    raise ValueError(f"bad override {item!r} in {spec!r}; {base} takes "
                                     f"{', '.join(f'{k}=' for k in params)}")
                if written.setdefault(key, value) != value:
                    raise ValueError(f"{key} is given twice in {spec!r}")
                params[key] = _coerce(value, defaults[key], item)
        if params["schedule"] not in SCHEDULES or not params["lr_scale"] > 0:
            raise ValueError(f"bad schedule or lr_scale in {spec!r}: schedule is one of "
                             f"{', '.join(SCHEDULES)}, lr_scale > 0")
        changed = tuple(k for k in sorted(params) if params[k] != defaults[k])
        text = base + (":" + ",".join(f"{k}={_text(params[k])}" for k in changed)
                       if changed else "")
        return Method(text, base, tuple(sorted(params.items())), changed, self.names,
                      self.envelope)

    def fixed_k(self, spec: str) -> int | None:
        """:attr:`Method.fixed_k` of ``spec`` (``None`` also for a spec that does not
        parse: not a method of the envelope)."""
        try:
            return self.parse(spec).fixed_k
        except ValueError:
            return None

    def parse_all(self, specs: Iterable[str]) -> list[Method]:
        """:meth:`parse` of each spec, each method once (in order)."""
        return list({m.spec: m for m in map(self.parse, specs)}.values())


def _text(value: Any) -> str:
    return str(value).replace(" ", "")


def _coerce(text: str, default: Any, item: str) -> Any:
    if default is None or isinstance(default, tuple):  # e.g. c_norm, tau_band
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise ValueError(f"bad value in {item!r}: expected a Python literal") from None
    if isinstance(default, str):
        return text
    try:
        if isinstance(default, bool):
            if text not in ("True", "False"):
                raise ValueError
            return text == "True"
        return type(default)(text)
    except ValueError:
        raise ValueError(f"bad value in {item!r}: expected {type(default).__name__}") from None


@dataclass(frozen=True)
class Complete:
    """A complete optimizer of the library (it sets its own step size; nothing is chained
    after it), built from the library function ``library``, the benchmark's settings, a key
    and the run's call budget (passed on only when ``told_budget``)."""

    spec: str
    label: str
    library: str  # the zoaq_jax attribute
    make: Callable[[Callable, Hyper, Any, int | None], optax.GradientTransformationExtraArgs]
    told_budget: bool = False

    def build(self, hyper: Hyper, key: Any, *,
              budget: int | None = None) -> optax.GradientTransformationExtraArgs:
        return self.make(getattr(zoaq_jax, self.library), hyper, key,
                         budget if self.told_budget else None)


def _keyed(opt, hyper, key, budget):
    """``opt(key=key)``: the library's defaults, no budget."""
    return opt(key=key)


def _budgeted(opt, hyper, key, budget):
    """``opt(budget, key=key)``: the library's defaults, told the budget."""
    return opt(budget, key=key)


def _first_step(learning_rate, opt, hyper, key, budget):
    """``opt(key=key, learning_rate=learning_rate)``: the library's defaults but the first
    step (``tuning_free:learning_rate=X``, a lane of a race: design round 10)."""
    return opt(key=key, learning_rate=learning_rate)


# One line a method: (settings, key, budget) -> the optimizer (module functions, so that a
# protocol holding them reaches a worker process).
COMPLETE = {c.spec: c for c in (
    Complete("tuning_free", "tuning_free", "tuning_free", _keyed),
    Complete("tuning_free:budget", "tuning_free, told the budget", "tuning_free", _budgeted,
             told_budget=True),
)}


FIRST_STEP = "tuning_free:learning_rate="  # the untold optimizer with another first step


def complete(spec: str) -> Complete | None:
    """The complete method ``spec`` (``None`` if it is not one): one of :data:`COMPLETE`,
    or ``tuning_free:learning_rate=X`` (untold, first step ``X``).

    Raises:
      ValueError: ``spec`` names one the installed zoaq_jax does not have.
    """
    method = COMPLETE.get(spec.strip())
    if method is None and spec.strip().startswith(FIRST_STEP):
        value = _coerce(spec.strip()[len(FIRST_STEP):], 1.0, spec)
        if not value > 0:
            raise ValueError(f"bad value in {spec!r}: the first step must be > 0")
        method = Complete(spec.strip(), f"tuning_free, first step {value:g}", "tuning_free",
                          functools.partial(_first_step, value))
    if method is not None and not hasattr(zoaq_jax, method.library):
        raise ValueError(f"{spec}: this zoaq_jax has no {method.library} (issue 32's optimizer "
                         "is not in this checkout)")
    return method


@dataclass(frozen=True)
class External:
    """A method of another library, run as a reference (its own code, not a chain)."""

    spec: str
    label: str
    k: int  # directions a step (2k calls: antithetic pairs)


EXTERNAL = {"open_es": External("open_es", "evosax Open_ES (pop. 20)", 10),
            "torch_loop": External("torch_loop", "PyTorch loop, ZO-AdaMM K=10", 10)}


# Issue 32's reference and baselines, shared by the benchmarks' anytime tables: the
# (learning rate, K) grid runs the rule's learning rate times LR_SCALES (a factor 2 apart)
# at each fixed K; the baselines are each run without tuning: K = 1 with a cosine decay
# over the budget, Optax's parameter-free optimizers after the R-AdaZO estimator,
# reduce-on-plateau on the free value estimate, auto_k.
LR_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
BASELINES = ("radazo:k=1,schedule=cosine", "radazo:backbone=prodigy,k=1",
             "radazo:backbone=dog,k=1", "radazo:backbone=dowg,k=1",
             "radazo:k=1,schedule=plateau", "auto_k")


SYNTHETIC_HYPER = Hyper(lr=1e-3, mu=5e-3)
"""The synthetic benchmark's hyperparameters, shared by all its methods (the paper's Table
"Common hyperparameters": betas (0.9, 0.99), eps 1e-8, no weight decay)."""


# The paper's synthetic defaults (Appendix, Tables 5-6); auto_k keeps the library's (no
# tuning per problem).
SYNTHETIC = Registry({
    "zoaq": {"k_min": 1, "k_max": 10, "n_hist": 8},
    "radazo": {"k": 10},
    "zo_adamm": {"k": 10},
    "statzo": {"k_min": 1, "k_max": 10, "theta": 0.5},
    "zoar": {"k": 10, "n_hist": 8},
    "auto_k": {},
}, envelope="gaussian")


# The synthetic benchmark's methods, as its protocols name them (synthetic, generalization).


@dataclass(frozen=True)
class Variant:
    """A method of a protocol, with an optional display label (``"ZoAQ-Norm"``): a spec of
    the registry or a complete optimizer (:data:`benchmarks.methods.COMPLETE`)."""

    method: Method | Complete
    label: str = ""

    @property
    def name(self) -> str:
        """The canonical spec (the ``method`` of every record)."""
        return self.method.spec

    @property
    def display(self) -> str:
        if isinstance(self.method, Complete):
            return self.label or self.method.label
        return self.label or self.method.label

    @property
    def grid_k(self) -> int | None:
        """:attr:`Method.grid_k` (``None`` for a complete optimizer)."""
        return None if isinstance(self.method, Complete) else self.method.grid_k

    @property
    def fixed_k(self) -> int | None:
        """:attr:`Method.fixed_k` (``None`` for a complete optimizer): the fixed-K
        envelope's methods."""
        return None if isinstance(self.method, Complete) else self.method.fixed_k

    @property
    def lr_scale(self) -> float:
        return 1.0 if isinstance(self.method, Complete) else self.method.get("lr_scale")

    @property
    def told_budget(self) -> bool:
        """Whether the method is built for the run's budget (one run a budget scored)."""
        if isinstance(self.method, Complete):
            return self.method.told_budget
        return self.method.get("schedule") == "cosine"

    @property
    def told_by_rebuild(self) -> bool:
        """Told its budget only by a build for that budget (a complete optimizer: one
        compilation a budget), not through a traced value (a cosine decay's steps)."""
        return isinstance(self.method, Complete) and self.method.told_budget

    @property
    def backbone(self) -> str:
        return "" if isinstance(self.method, Complete) else self.method.get("backbone")

    def build(self, hyper: Hyper, key,
              budget: int | None = None) -> optax.GradientTransformationExtraArgs:
        return self.method.build(hyper, key, budget=budget)


def variant(spec: str, label: str = "") -> Variant:
    """The variant of ``spec`` (``ValueError`` if it does not parse)."""
    return Variant(complete(spec) or SYNTHETIC.parse(spec), label)


def parse_methods(specs: list[str]) -> list[Variant]:
    """The variants of ``--methods`` (each once); a bad spec ends the command."""
    try:
        return list({v.name: v for v in map(variant, flags.items(specs))}.values())
    except ValueError as err:
        flags.fail(str(err))
