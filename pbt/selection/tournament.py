"""Tournament selection with elitism (AgileRL's evolutionary HPO), one member deciding at a time.

A member's fitness is the mean of its last ``eval_loop`` objectives (records carry that history).
The member draws ``tournament_size`` members at random (without replacement) from the snapshot's
members with a known fitness, itself included; the fittest contestant wins (ties: the lower
policy_idx). If the winner is fitter than this member, the member takes the winner's weights and
hyperparameters and then mutates them (the configured explore step); if it wins itself it keeps
its own. If the draw left it out and no contestant beats it, it keeps its weights and mutates its
hyperparameters: AgileRL draws a mutation for every member of each new generation. A member never takes
the weights of a member that is not fitter than itself.

``elitism: true``: the population's fittest member changes nothing at all (AgileRL keeps a clone of
its elite, which draws a mutation too unless ``Mutations(mutate_elite=False)``); false: it may mutate
its hyperparameters, never its weights.

``mutate_winners: true`` (AgileRL's behaviour): a member that wins its own tournament keeps its
weights but mutates its hyperparameters, as every member of AgileRL's next generation draws a
mutation; false (the default): a winner changes nothing, so a good member is not disturbed.

Noise guards: the ready rule (this member, and contestants: a member that is not ready is not
drawn), the unknown-objective wait, the timing gates and the significance test (a winner whose
lead is not significant only makes this member mutate) apply. Tournaments are greedy: with
``eval_loop: 1`` a lucky early objective wins, which is what ``eval_loop`` > 1 and the significance
test damp.
"""

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Sequence

from pbt.sections import Section, require
from pbt.selection.base import Decision, MemberState, Strategy, fmt
from pbt.selection.experience import fitness
from pbt.selection.population import eligible_donors

if TYPE_CHECKING:
    from pbt.storage.record import Record


@dataclass
class TournamentConfig(Section):
    """Settings of tournament selection (flat ``pbt.*`` keys)."""

    tournament_size: int = 2
    """Members drawn at random (this member among the candidates) for one tournament."""
    elitism: bool = True
    """The population's fittest member keeps its weights and hyperparameters unchanged."""
    eval_loop: int = 1
    """Fitness is the mean of a member's last this-many objectives (one per PBT iteration)."""
    mutate_winners: bool = False
    """A member that wins its own tournament mutates its hyperparameters (keeping its weights), as
    AgileRL draws a mutation for every member of a new generation; false: it keeps them unchanged."""

    def __post_init__(self) -> None:
        require(self.tournament_size >= 2, "tournament_size", self.tournament_size, ">= 2")
        require(self.eval_loop >= 1, "eval_loop", self.eval_loop, ">= 1")


def tournament_winner(contestants: Sequence[int], fitnesses: Dict[int, float]) -> int:
    """The fittest of ``contestants`` (ties: the lower policy_idx)."""
    return min(contestants, key=lambda i: (-fitnesses[i], i))


class Tournament(Strategy):
    """Random tournaments; the winner's weights and hyperparameters, mutated, replace the loser's."""

    config_class = TournamentConfig
    initial_mutation = True
    settings: TournamentConfig

    @property
    def window(self) -> int:
        return self.settings.eval_loop

    def decide(self, own: MemberState, peers: Sequence["Record"], rng: random.Random) -> Decision:
        wait = self.waiting(own)
        if wait is not None:
            return self.keep(own, wait)
        gates = self.ctx.gates
        idx = own.record.policy_idx
        cfg = self.settings
        view = self.view(own, peers)
        known: Dict[int, float] = {}
        for i in sorted(view):
            value = fitness(view[i], cfg.eval_loop)
            if value is not None:
                known[i] = value
        own_fitness = known.get(idx)
        if cfg.elitism and own_fitness is not None and own_fitness >= max(known.values()):
            return self.keep(own, f"elite: the fittest member (fitness {fmt(own_fitness)}, eval_loop {cfg.eval_loop})")
        others = eligible_donors(
            [r for i, r in sorted(view.items()) if r is not None and i != idx and i in known],
            gates.ready_frames,
            self.ctx.refused_donors,
        )
        pool: List[int] = sorted(([idx] if own_fitness is not None else []) + [r.policy_idx for r in others])
        if len(pool) < 2:
            return self.keep(own, f"{len(pool)} member(s) with a known fitness may compete: no tournament")
        contestants = sorted(rng.sample(pool, min(cfg.tournament_size, len(pool))))
        winner = tournament_winner(contestants, known)
        numbers = (
            f"contestants {contestants} fitness {[fmt(known[i]) for i in contestants]} "
            f"(eval_loop {cfg.eval_loop}), own {fmt(own_fitness)}"
        )
        own_params = dict(own.record.params)
        if winner == idx and cfg.mutate_winners:
            return self.act(own, None, own_params, f"won its tournament, mutate_winners: mutate ({numbers})", rng)
        if winner == idx:
            return self.keep(own, f"won its tournament: {numbers}")
        if own_fitness is not None and not known[winner] > own_fitness:
            return self.act(
                own, None, own_params, f"left out of the draw and no contestant fitter: mutate ({numbers})", rng
            )
        donor = view[winner]
        assert donor is not None
        reason = f"lost to {winner}: {numbers}"
        return self.replace_if_significant(own, donor, reason, rng)
