"""Estimators as a recognisable kind of Optax transformation, and a chain that checks order.

An estimator computes its estimate from ``value_fn`` and ignores the incoming
``updates``, so whatever a chain puts before it has no effect (a clip there clips the
caller's ``None``). :func:`optax.chain` cannot know this; :func:`chain` refuses it.
"""

from __future__ import annotations

import optax


class Estimator(optax.GradientTransformationExtraArgs):
    """An estimator, or a chain that starts with one: ``update`` ignores ``updates``.

    A subclass of :class:`optax.GradientTransformationExtraArgs` (``optax.chain`` and
    Optax's wrappers take it unchanged) that :func:`chain` recognises.
    """

    __slots__ = ()


def _describe(transform) -> str:
    """A transformation's factory name, from its update function (``clip_by_global_norm``)."""
    name = getattr(transform.update, "__qualname__", type(transform).__name__)
    name = name.split(".<locals>")[0]
    return "a chain led by an estimator" if name == "chain" else name


def chain(*transforms: optax.GradientTransformation) -> optax.GradientTransformationExtraArgs:
    r""":func:`optax.chain` that refuses transformations placed before an estimator.

    .. math:: \mathrm{chain}(E, T_1, \dots, T_n)(x) = T_n \circ \dots \circ T_1(E(x))

    An estimator (:class:`Estimator`: every estimator, alias and estimator-led chain of
    this library) ignores its incoming ``updates``, so a transformation before it (a clip,
    weight decay, noise, another estimator) would silently have no effect; such a chain
    is refused. Put the estimator first and clip, decay or rescale its estimate after it.

    Args:
      transforms: Optax transformations; an estimator, if any, first.

    Returns:
      An :class:`Estimator` if the chain starts with one, else the
      :class:`optax.GradientTransformationExtraArgs` of :func:`optax.chain` (a backbone
      to place after an estimator).

    Raises:
      TypeError: if an argument is not an Optax transformation.
      ValueError: if a transformation comes before an estimator (the message names its
        position and the estimator's).

    Example:
      >>> import jax.numpy as jnp, optax, zoaq_jax
      >>> opt = zoaq_jax.chain(zoaq_jax.fixed_estimator(k=2), optax.clip_by_global_norm(1.0),
      ...                      optax.scale_by_learning_rate(0.1))
      >>> isinstance(opt, zoaq_jax.Estimator)
      True
      >>> zoaq_jax.chain(optax.clip_by_global_norm(1.0), zoaq_jax.fixed_estimator(k=2))
      ... # doctest: +ELLIPSIS
      Traceback (most recent call last):
      ValueError: zoaq_jax.chain: transformation 0 (clip_by_global_norm) is placed before ...

    References:
      Optax, ``optax.chain``.
    """
    for i, transform in enumerate(transforms):
        if not isinstance(transform, optax.GradientTransformation):
            raise TypeError(f"zoaq_jax.chain: argument {i} is a {type(transform).__name__}, "
                            "not an Optax transformation (optax.GradientTransformation)")
    later = [i for i, t in enumerate(transforms) if isinstance(t, Estimator) and i > 0]
    if later:
        first = later[0]
        misplaced = ", ".join(f"{i} ({_describe(transforms[i])})" for i in range(first))
        raise ValueError(
            f"zoaq_jax.chain: transformation {misplaced} is placed before the estimator at "
            f"position {first} ({_describe(transforms[first])}). An estimator computes its "
            "estimate from value_fn and ignores the incoming updates, so what comes before "
            "it has no effect. Put the estimator first and what should transform its "
            "estimate after it, e.g. zoaq_jax.chain(estimator, optax.clip_by_global_norm(1.0), "
            "backbone, optax.scale_by_learning_rate(lr)); a chain holds one estimator.")
    chained = optax.chain(*transforms)
    if transforms and isinstance(transforms[0], Estimator):
        return Estimator(*chained)
    return chained
