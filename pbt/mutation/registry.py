"""Mutations by the name used in ``pbt.mutation`` schemes, each with its declared properties.

Adding a mutation: write it (a function in :mod:`pbt.mutation.hyperparameters`, or a new
:class:`pbt.mutation.base.Mutation` kind in its own module) and add one entry to ``_ENTRIES``.
Names are looked up here and never ``eval``-ed.
"""

from typing import Dict, Tuple

from pbt.errors import ConfigError, did_you_mean
from pbt.mutation.base import DISCOUNT_RANGE, HyperparameterMutation, Mutation, MutationFunc
from pbt.mutation.hyperparameters import (
    DISCOUNT_VALUE_RANGE,
    EPS_CLIP_RANGE,
    MIN_1_RANGE,
    MINI_EPOCHS_RANGE,
    mutate_discount,
    mutate_eps_clip,
    mutate_float,
    mutate_float_min_1,
    mutate_mini_epochs,
)

_ENTRIES: Tuple[Mutation, ...] = (
    HyperparameterMutation("mutate_float", mutate_float, linear_bounds=True),
    HyperparameterMutation("mutate_float_min_1", mutate_float_min_1, linear_bounds=True, value_range=MIN_1_RANGE),
    HyperparameterMutation("mutate_eps_clip", mutate_eps_clip, value_range=EPS_CLIP_RANGE),
    HyperparameterMutation("mutate_mini_epochs", mutate_mini_epochs, value_type=int, value_range=MINI_EPOCHS_RANGE),
    HyperparameterMutation(
        "mutate_discount", mutate_discount, change_range=DISCOUNT_RANGE, value_range=DISCOUNT_VALUE_RANGE
    ),
)

MUTATIONS: Dict[str, Mutation] = {mutation.name: mutation for mutation in _ENTRIES}
"""Every registered mutation by name."""

MUTATION_FUNCS: Dict[str, MutationFunc] = {m.name: m.func for m in _ENTRIES if isinstance(m, HyperparameterMutation)}
"""The hyperparameter mutation functions by name."""


def get_mutation(name: str) -> Mutation:
    """The mutation registered as ``name``; ConfigError listing the valid names otherwise."""
    mutation = MUTATIONS.get(name) if isinstance(name, str) else None
    if mutation is None:
        valid = sorted(MUTATIONS)
        hint = did_you_mean(name, valid, n=1) if isinstance(name, str) else ""
        raise ConfigError(
            f"Unknown mutation function {name!r}.{hint} Valid names: {', '.join(valid)}. "
            "Use one of them in the pbt.mutation scheme."
        )
    return mutation


def get_mutation_func(name: str) -> MutationFunc:
    """The hyperparameter function registered as ``name``; ConfigError listing the valid names."""
    mutation = get_mutation(name)
    if not isinstance(mutation, HyperparameterMutation):
        raise ConfigError(
            f"Mutation {name!r} changes the {mutation.target}, not a hyperparameter: it has no scalar function."
        )
    return mutation.func
