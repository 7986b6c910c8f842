#!/bin/bash
# Default sbatch template of the pbt launcher (python -m launcher.run --backend=slurm).
#
# A template is the top of the batch script: the launcher appends the lines that pick this array
# task's member (by SLURM_ARRAY_TASK_ID) from the run's commands file, run it with its output
# appended to the member's log, and requeue the job on SIGUSR1 (sent before the time limit with
# --signal=B:USR1@<seconds>). So a template only needs the cluster's setup, for example:
#
#   #SBATCH --account=my_account        (launcher options given on the command line win)
#   module load cuda/12.1
#   source ~/miniconda3/etc/profile.d/conda.sh && conda activate pbt
#
# Give your own with --slurm_sbatch_template=path/to/template.sh. The job starts in the directory
# the launcher ran in and inherits its environment (sbatch's default --export=ALL), so with a
# shared filesystem and the same virtualenv nothing else is needed.
