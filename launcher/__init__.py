"""Checkout-only spelling of :mod:`pbt.launcher` (not installed): ``python -m launcher.run`` and
``from launcher import RunDescription`` keep working from the repository root. Installed, use
``pbt-launch`` / ``python -m pbt.launcher.run`` and ``from pbt.launcher import ...``."""

from pbt.launcher import Experiment, Member, ParamGenerator, ParamGrid, ParamList, RunDescription

__all__ = ["Experiment", "Member", "ParamGenerator", "ParamGrid", "ParamList", "RunDescription"]
