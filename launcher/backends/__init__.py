"""Where members run: ``processes`` (this machine) and ``slurm`` (sbatch job arrays)."""
