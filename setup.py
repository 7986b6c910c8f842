"""Package layout (the rest of the metadata is in pyproject.toml).

The repository keeps ``configs/`` and ``experiments/`` at the top level; the wheel ships them inside
the ``pbt`` package (``pbt/configs``, found by Hydra through :data:`pbt.resolvers.CONFIG_DIR`, and
``pbt.experiments``), so nothing but ``pbt`` lands in site-packages. The checkout-only ``launcher``
package (``python -m launcher.run``) is not installed.
"""
from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["pbt", "pbt.*"]), "pbt.experiments", "pbt.configs"],
    package_dir={"pbt.experiments": "experiments", "pbt.configs": "configs"},
    package_data={"pbt.configs": ["*.yaml", "*/*.yaml", "*/*/*.yaml", "*/*/*/*.yaml"],
                  "pbt.launcher": ["slurm_template.sh"]},
)
