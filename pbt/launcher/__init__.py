"""Launch a run (e.g. a PBT population) locally or on Slurm: ``python -m launcher.run --run=experiments.<module>``.

Experiment modules define ``RUN_DESCRIPTION`` with the classes exported here. The launcher does not
import torch and runs on Python 3.8.
"""

from pbt.launcher.run_description import Experiment, Member, ParamGenerator, ParamGrid, ParamList, RunDescription

__all__ = ["Experiment", "Member", "ParamGenerator", "ParamGrid", "ParamList", "RunDescription"]
