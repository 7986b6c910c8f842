"""Experiment descriptions for ``python -m launcher.run --run=experiments.<module>``.

Each module defines ``RUN_DESCRIPTION`` (see ``launcher.run_description``). One Experiment is one
PBT population: ``ParamGrid([("pbt.policy_idx", range(N))])``; the launcher adds
``pbt.workspace=``, ``pbt.num_policies=``, ``train_dir=`` and ``experiment=`` to every member.
"""
