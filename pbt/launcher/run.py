"""``pbt-launch --run=experiments.<module> --backend=processes|slurm [options]`` (also
``python -m pbt.launcher.run``, and ``python -m launcher.run`` from a checkout).

Starts every member of the run described by ``RUN_DESCRIPTION`` in the given module, locally
(``processes``) or as Slurm job arrays (``slurm``). Running the same command again on the same
``--train_dir`` resumes the run: each member reruns its command and resumes from its workspace.

Examples::

    # a 4-member PBT population on Pendulum, on CPU
    python -m launcher.run --run=experiments.smoke_pbt --backend=processes --num_gpus=0

    # 8 members on a 4-GPU machine, two per GPU
    python -m launcher.run --run=experiments.isaacgym_allegro_kuka_pbt --backend=processes \\
        --max_parallel=8 --num_gpus=4 --experiments_per_gpu=2

    # two more members for the running elastic population of the first example
    # (its command sets pbt.num_policies=auto), from a second shell
    python -m launcher.run --run=experiments.pendulum_elastic --backend=processes --num_gpus=0 --add=2

    # one Slurm job array, one GPU per member, requeued at the time limit
    python -m launcher.run --run=experiments.isaacgym_ant_pbt --backend=slurm \\
        --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=8 --slurm_timeout=24:00:00
"""

import argparse
import importlib
import importlib.util
import json
import logging
import os
import sys
from typing import Any, Dict, List, Optional

from pbt.errors import ConfigError, PbtError, did_you_mean
from pbt.launcher.backends import BACKENDS, DEFAULT_BACKEND, get_backend
from pbt.launcher.backends.base import str2bool
from pbt.launcher.run_description import Member, RunDescription, added_members, is_elastic
from pbt.storage.local import atomic_write_bytes
from pbt.storage.reader import WorkspaceReader

log = logging.getLogger("launcher")


def launcher_argparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pbt-launch",
        description="Launch every member of an experiment description (a PBT population) locally or on Slurm.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--run",
        required=True,
        help="module defining RUN_DESCRIPTION, e.g. experiments.smoke_pbt (a .py path works too)",
    )
    parser.add_argument("--backend", default=DEFAULT_BACKEND, choices=list(BACKENDS), help="where the members run")
    parser.add_argument(
        "--train_dir", default="train_dir", help="root of all runs; the run goes to <train_dir>/<run_name>"
    )
    parser.add_argument(
        "--max_parallel", type=int, default=0, help="members running at once (0: all; slurm: the array's %%K limit)"
    )
    parser.add_argument(
        "--dry_run", type=str2bool, nargs="?", const=True, default=False, help="print the members' commands and exit"
    )
    parser.add_argument(
        "--add",
        type=int,
        default=0,
        help="start N more members of a running elastic population (pbt.num_policies=auto) of this run "
        "on the same --train_dir, at the next free policy indices, and only them (processes backend)",
    )
    parser.add_argument(
        "--add_to",
        default=None,
        help="with --add: the experiment to grow (default: the run's only elastic PBT experiment)",
    )
    parser.add_argument(
        "--log_level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="launcher log level"
    )
    for backend in BACKENDS.values():  # each backend adds its own option group
        backend.add_cli_args(parser)
    return parser


def _module_name(run: str) -> str:
    if run.endswith(".py"):
        path = os.path.relpath(os.path.abspath(run))
        return path[: -len(".py")].replace(os.sep, ".")
    return run


def _import_file(path: str) -> Any:
    """The module in ``path``, a .py file outside the working directory (not importable by name)."""
    if not os.path.isfile(path):
        raise ConfigError(f"--run={path}: no such file; give an experiment module's path or its dotted name.")
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILTIN_EXPERIMENTS = "experiments"
"""The examples' package in a checkout; an installed wheel ships them as ``pbt.experiments``."""


def _import_module(name: str) -> Any:
    """``importlib.import_module(name)``; ``experiments.<x>`` falls back to the installed
    ``pbt.experiments.<x>`` when no ``experiments`` package is importable (a wheel, outside a checkout)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != BUILTIN_EXPERIMENTS or not name.startswith(BUILTIN_EXPERIMENTS + "."):
            raise
    return importlib.import_module(f"pbt.{name}")


def load_run_description(run: str) -> RunDescription:
    """Import ``run`` (``experiments.smoke_pbt`` or ``experiments/smoke_pbt.py``) and return its RUN_DESCRIPTION."""
    name = _module_name(run)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = _import_file(run) if name.startswith(".") else _import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            package, _, _ = name.rpartition(".")
            candidates: List[str] = []
            if package:
                try:
                    pkg = importlib.import_module(package)
                    for directory in getattr(pkg, "__path__", []):
                        candidates += [
                            f"{package}.{f[:-3]}"
                            for f in os.listdir(directory)
                            if f.endswith(".py") and f != "__init__.py"
                        ]
                except ImportError:
                    pass
            raise ConfigError(
                f"--run={run}: no module {name!r} (run from the repository root, or check the name).{did_you_mean(name, candidates)}"
            ) from None
        raise
    description = getattr(module, "RUN_DESCRIPTION", None)
    if not isinstance(description, RunDescription):
        raise ConfigError(
            f"--run={run}: module {name!r} has no RUN_DESCRIPTION (a launcher.RunDescription); define "
            f"RUN_DESCRIPTION = RunDescription('name', experiments=[Experiment(...)])."
        )
    return description


MANIFEST = "members.json"


def _manifest_members(run_dir: str) -> List[Dict[str, Any]]:
    """The members recorded in ``<run_dir>/members.json`` ([] when there is none yet)."""
    path = os.path.join(run_dir, MANIFEST)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(json.load(f).get("members", []))


def _write_manifest(run_dir: str, backend: str, members: List[Member], added: bool = False) -> None:
    """``<run_dir>/members.json``: every member started (members added later are appended)."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, MANIFEST)
    entries = [m.to_dict() for m in members]
    if added:
        names = {e["name"] for e in entries}
        entries = [e for e in _manifest_members(run_dir) if e.get("name") not in names] + entries
    manifest = {"backend": backend, "members": entries}
    atomic_write_bytes(path, json.dumps(manifest, indent=1).encode())


def _members_to_add(
    description: RunDescription, members: List[Member], run_dir: str, args: argparse.Namespace
) -> List[Member]:
    """``--add N``: N new members of the chosen elastic experiment, above every index already used
    (by the description, by earlier ``--add`` runs in the manifest, and by the workspace)."""
    if args.backend != "processes":
        raise ConfigError(
            f"--add starts the new members as local processes; --backend={args.backend} is not "
            "supported with it. Start them with --backend=processes on a machine that sees the "
            "run's train_dir."
        )
    elastic = sorted({m.experiment for m in members if is_elastic(m)})
    chosen = args.add_to or (elastic[0] if len(elastic) == 1 else None)
    if chosen is None or chosen not in {m.experiment for m in members}:
        names = [e.name for e in description.experiments]
        raise ConfigError(
            f"--add: {'no' if not elastic else 'which'} elastic experiment to grow (elastic: {elastic or 'none'}; "
            f"the run has {names}). "
            + (
                f"Name it with --add_to=<experiment>.{did_you_mean(args.add_to or '', names)}"
                if elastic
                else "Set pbt.num_policies=auto in its command."
            )
        )
    grown = [m for m in members if m.experiment == chosen]
    taken = {
        e["index"]
        for e in _manifest_members(run_dir)
        if e.get("experiment") == chosen and isinstance(e.get("index"), int)
    }
    if grown[0].workspace and os.path.isdir(grown[0].workspace):
        taken |= set(WorkspaceReader(grown[0].workspace).member_indices())
    return added_members(grown, taken, args.add)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(asctime)s][launcher][%(levelname)s] %(message)s", datefmt="%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def launch(args: argparse.Namespace) -> int:
    """Run the parsed command line; returns the exit status. Raises PbtError on bad input."""
    return launch_description(load_run_description(args.run), args)


def launch_description(description: RunDescription, args: argparse.Namespace) -> int:
    """Run ``description`` with the launcher options ``args`` (``--run`` is not read); returns the
    exit status. Raises PbtError on bad input."""
    members = description.members(args.train_dir)
    run_dir = description.run_dir(args.train_dir)
    if args.add:
        members = _members_to_add(description, members, run_dir, args)
        log.info(
            "run %s: adding %d member(s) to experiment %s: policy indices %s",
            description.run_name,
            len(members),
            members[0].experiment,
            [m.index for m in members],
        )
    log.info(
        "run %s: %d member(s) in %d experiment(s) -> %s",
        description.run_name,
        len(members),
        len(description.experiments),
        run_dir,
    )
    if args.dry_run:
        for member in members:
            log.info("[%s] %s", member.name, member.shell_cmd)
        return 0
    if os.path.isdir(run_dir):
        log.info("%s exists: members resume from their workspace and checkpoints", run_dir)
    backend = get_backend(args.backend)
    options = backend.options_from_args(args)
    _write_manifest(run_dir, args.backend, members, added=bool(args.add))
    return backend.run(description.run_name, members, options)


def main(argv: Optional[List[str]] = None) -> int:
    args = launcher_argparser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        return launch(args)
    except PbtError as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
