"""The PBT decision: a pure function from a population snapshot to keep / mutate / replace.

``decide`` reads no files and starts nothing: it takes this member's state, the peers' records and
the config, and returns a ``Decision`` saying what to do, with which donor, why (the rule that fired
and its numbers) and the hyperparameters before and after. All randomness comes from the ``rng``
argument; peers are visited in policy_idx order, so a decision is reproducible from a seed.

- :mod:`pbt.selection.base`: Decision, MemberState, the Strategy interface, the shared gates;
- :mod:`pbt.selection.population`: the view of the population, ranking, groups, donor eligibility;
- :mod:`pbt.selection.dexpbt`, :mod:`pbt.selection.threshold`, :mod:`pbt.selection.truncation`,
  :mod:`pbt.selection.tournament`: the strategies;
- :mod:`pbt.selection.experience`: equal-experience comparison (each peer paired with this member);
- :mod:`pbt.selection.registry`: name -> strategy, and ``decide`` / ``initial_mutation``;
- :mod:`pbt.selection.stats`: the Welch t-test behind the significance gate.
"""

from pbt.selection.base import KEEP, MUTATE, REPLACE, Context, Decision, MemberState, SelectionGates, Strategy
from pbt.selection.dexpbt import DexPbt, DexPbtConfig
from pbt.selection.population import (
    eligible_donors,
    group_size,
    is_diverged,
    is_ready,
    known_objective,
    mean_std,
    population_view,
    rank,
    refused_for_params,
    trimmed_std,
)
from pbt.selection.registry import (
    STRATEGIES,
    SelectionSettings,
    decide,
    default_settings,
    get_strategy,
    initial_mutation,
    strategy_names,
)
from pbt.selection.threshold import Threshold, ThresholdConfig
from pbt.selection.tournament import Tournament, TournamentConfig
from pbt.selection.truncation import Truncation, TruncationConfig
from pbt.storage.record import check_policy_idx  # the one check, where the limit is

__all__ = [
    "KEEP",
    "MUTATE",
    "REPLACE",
    "STRATEGIES",
    "Context",
    "Decision",
    "DexPbt",
    "DexPbtConfig",
    "MemberState",
    "SelectionGates",
    "SelectionSettings",
    "Strategy",
    "Threshold",
    "ThresholdConfig",
    "Tournament",
    "TournamentConfig",
    "Truncation",
    "TruncationConfig",
    "check_policy_idx",
    "decide",
    "default_settings",
    "eligible_donors",
    "get_strategy",
    "group_size",
    "initial_mutation",
    "refused_for_params",
    "is_diverged",
    "is_ready",
    "known_objective",
    "mean_std",
    "population_view",
    "rank",
    "strategy_names",
    "trimmed_std",
]
