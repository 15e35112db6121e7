"""One API style: what a factory is built from is positional, every option keyword-only."""

import inspect

import pytest

import zoaq_jax

# The positional parameters of every public factory (an optimizer's learning rate, an
# estimator's or budget rule's direction counts, a policy's kind or the object it wraps);
# everything else is keyword-only.
POSITIONAL = {
    **{name: ("learning_rate",) for name in (
        "zoaq", "radazo", "zo_adamm", "zo_sgd", "mezo", "zoar", "statzo", "auto_k",
        "hizoo")},
    "fixed_estimator": ("k",), "zoar_estimator": ("k",), "hizoo_estimator": ("k",),
    "zoaq_estimator": ("k_min", "k_max"), "statzo_estimator": ("k_min", "k_max"),
    "auto_k_estimator": ("k_min", "k_max"),
    "adaptive_estimator": ("gate", "budget", "retention"),
    "scale_by_radazo": (), "scale_by_zo_adamm": (), "monitor_consistency": (),
    "gates.momentum": (), "gates.momentum_norm": (), "gates.norm_test": (),
    "gates.accept": ("gate",),
    "budgets.constant": ("k",), "budgets.reset": ("kind",),
    "budgets.progress": (),
    "retention.fifo": ("n_hist",), "retention.none": (),
    "run": ("opt", "value_fn", "params", "num_steps"), "host_oracle": ("fn",),
    "tuning_free": ("budget",),
}
BUILDS = ("GradientTransformation", "Gate", "BudgetRule", "Retention")


def _public_functions():
    for module, prefix in ((zoaq_jax, ""), (zoaq_jax.gates, "gates."),
                           (zoaq_jax.budgets, "budgets."), (zoaq_jax.retention, "retention.")):
        for name in module.__all__:
            if inspect.isfunction(obj := getattr(module, name)):
                yield prefix + name, obj


def test_every_public_factory_is_listed():
    """A new factory (it returns a transformation or a policy) states its positional
    parameters here (``chain(*transforms)`` takes only transformations)."""
    factories = {name for name, fn in _public_functions()
                 if any(b in str(inspect.signature(fn).return_annotation) for b in BUILDS)}
    factories.discard("chain")
    assert factories - set(POSITIONAL) == set()


@pytest.mark.parametrize("name", sorted(POSITIONAL))
def test_options_are_keyword_only(name):
    fn = dict(_public_functions())[name]
    params = inspect.signature(fn).parameters.values()
    positional = tuple(p.name for p in params
                       if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    assert positional == POSITIONAL[name]
    with pytest.raises(TypeError, match="positional argument"):
        fn(*[None] * (len(positional) + 1))  # one positional option too many
