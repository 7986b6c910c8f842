"""TRPO as an rl_games learner (``train.params.algo.name=trpo``).

:mod:`~pbt.rl_games.trpo.optim` (the math: conjugate gradient, Fisher-vector products, line search),
:mod:`~pbt.rl_games.trpo.settings` (its config keys, no torch), :mod:`~pbt.rl_games.trpo.agent` (the
rl_games agent), :mod:`~pbt.rl_games.trpo.spmd` (multi-process training), and
:mod:`~pbt.rl_games.trpo.adapter` (what PBT can change in a running TRPO agent, no torch). Importing
this package imports no torch.
"""
