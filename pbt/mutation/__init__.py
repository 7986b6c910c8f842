"""PBT's explore step: mutations, their registry, and applying a mutation scheme.

- :mod:`pbt.mutation.base`: what a mutation is (target, needs-rebuild, validate, apply);
- :mod:`pbt.mutation.hyperparameters`: DexPBT's hyperparameter functions;
- :mod:`pbt.mutation.registry`: name -> mutation with its declared properties;
- :mod:`pbt.mutation.scheme`: mutate a member's hyperparameters by a scheme, validate a scheme;
- :mod:`pbt.mutation.explore`: the ``explore`` config section.
- :mod:`pbt.mutation.network`: AgileRL's network mutations (``pbt/mutation=agilerl``): the network
  spec, the ``network_mutation`` settings and the pure decision of each explore step.

No torch: runs on Python 3.8 with the standard library only.
"""

from pbt.mutation.base import (
    CHANGE_RANGES,
    DISCOUNT_RANGE,
    GENERAL_RANGE,
    HYPERPARAMETER,
    TARGETS,
    UNBOUNDED,
    HyperparameterMutation,
    InvalidValueError,
    Mutation,
    MutationFunc,
)
from pbt.mutation.explore import BOUND_SCALES, DEFAULT_MUTATION, FROZEN_KEYS, FROZEN_TREES, ExploreConfig, frozen_reason
from pbt.mutation.hyperparameters import (
    DISCOUNT_CHANGE_RANGE,
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
from pbt.mutation.registry import MUTATION_FUNCS, MUTATIONS, get_mutation, get_mutation_func
from pbt.mutation.scheme import (
    allowed_range,
    check_value,
    checked_params,
    clamp,
    current_params,
    mutate,
    mutate_params,
    validate_scheme,
)

__all__ = [
    "DISCOUNT_VALUE_RANGE",
    "FROZEN_KEYS",
    "FROZEN_TREES",
    "InvalidValueError",
    "MIN_1_RANGE",
    "UNBOUNDED",
    "allowed_range",
    "check_value",
    "checked_params",
    "frozen_reason",
    "BOUND_SCALES",
    "CHANGE_RANGES",
    "DEFAULT_MUTATION",
    "DISCOUNT_CHANGE_RANGE",
    "DISCOUNT_RANGE",
    "EPS_CLIP_RANGE",
    "GENERAL_RANGE",
    "HYPERPARAMETER",
    "MINI_EPOCHS_RANGE",
    "MUTATIONS",
    "MUTATION_FUNCS",
    "TARGETS",
    "ExploreConfig",
    "HyperparameterMutation",
    "Mutation",
    "MutationFunc",
    "clamp",
    "current_params",
    "get_mutation",
    "get_mutation_func",
    "mutate",
    "mutate_discount",
    "mutate_eps_clip",
    "mutate_float",
    "mutate_float_min_1",
    "mutate_mini_epochs",
    "mutate_params",
    "validate_scheme",
]
