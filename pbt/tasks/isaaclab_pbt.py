"""Isaac Lab's PBT settings (``agent.pbt.*``, or the ``pbt:`` block of a task's rl_games agent YAML)
as this project's ``pbt.*`` overrides. Pure (no torch, no Isaac Lab); used by ``task=isaaclab/<TaskId>``.

| Isaac Lab (``isaaclab_rl.rl_games.pbt.PbtCfg``) | here |
| --- | --- |
| ``enabled: true`` | ``pbt=pbt_default pbt.selection=threshold pbt.threshold_abs_relative=false pbt.start_after=0 pbt.initial_delay=0 pbt.initial_mutation=false`` |
| ``policy_idx``, ``num_policies``, ``objective``, ``interval_steps``, ``mutation_rate`` | same name under ``pbt.`` |
| ``threshold_std``, ``threshold_abs`` | ``pbt.threshold_std``, ``pbt.threshold_abs`` (objective units) |
| ``directory`` + ``workspace`` | ``pbt.workspace=<directory>/<workspace>`` |
| ``change_range: [a, b]`` | ``pbt.change_min=a pbt.change_max=b`` |
| ``mutation: {agent.params.config.X: f}`` | the mutation scheme ``{train.params.config.X: f}`` |
"""

import os
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from pbt.errors import ConfigError, did_you_mean
from pbt.restart import format_value

PREFIX = "agent.pbt."
SAME_NAME = (
    "policy_idx",
    "num_policies",
    "objective",
    "interval_steps",
    "mutation_rate",
    "threshold_std",
    "threshold_abs",
)
KNOWN = frozenset(SAME_NAME + ("enabled", "directory", "workspace", "change_range", "mutation"))


def split_agent_pbt(argv: Sequence[str]) -> Tuple[Dict[str, str], List[str]]:
    """``agent.pbt.<key>=<value>`` arguments (by key) and the other arguments, in order."""
    found: Dict[str, str] = {}
    rest: List[str] = []
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if sep and key.startswith(PREFIX):
            found[key[len(PREFIX) :]] = value
        else:
            rest.append(arg)
    return found, rest


def _parse(value: Any) -> Any:
    """A command-line value as YAML reads it (``true``, ``1e7``, ``[1.1,2.0]``)."""
    if not isinstance(value, str):
        return value
    import yaml

    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    if isinstance(parsed, str):
        try:
            return float(parsed) if any(c in parsed for c in ".eE") else int(parsed)
        except ValueError:
            return parsed
    return parsed


def pbt_overrides(block: Mapping[str, Any], cli: Mapping[str, str]) -> List[str]:
    """Our overrides for Isaac Lab's PBT settings (the agent YAML's block, then ``agent.pbt.*``
    from the command line over it); empty when PBT is not enabled there."""
    cfg: Dict[str, Any] = dict(block or {})
    cfg.update({k: _parse(v) for k, v in cli.items()})
    unknown = sorted(set(cfg) - KNOWN)
    if unknown:
        hints = "".join(did_you_mean(u, KNOWN) for u in unknown)
        raise ConfigError(
            f"agent.pbt.{unknown[0]}: not one of Isaac Lab's PBT settings ({', '.join(sorted(KNOWN))}).{hints}"
        )
    if not bool(cfg.get("enabled", False)):
        return []
    out = [
        "pbt=pbt_default",
        "pbt.selection=threshold",
        "pbt.threshold_abs_relative=false",
        "pbt.start_after=0",
        "pbt.initial_delay=0",
        "pbt.initial_mutation=false",
    ]  # Isaac Lab starts from the values given
    for key in SAME_NAME:
        if key in cfg:
            out.append(f"pbt.{key}={format_value(cfg[key])}")
    if "workspace" in cfg or "directory" in cfg:
        directory = str(cfg.get("directory") or ".")
        workspace = str(cfg.get("workspace") or "pbt_workspace")
        out.append(
            f"pbt.workspace={format_value(workspace if directory == '.' else os.path.join(directory, workspace))}"
        )
    if "change_range" in cfg:
        low, high = (float(v) for v in cfg["change_range"])
        out += [f"pbt.change_min={format_value(low)}", f"pbt.change_max={format_value(high)}"]
    mutation = cfg.get("mutation")
    if mutation:
        scheme = {
            ("train." + k[len("agent.") :] if str(k).startswith("agent.") else str(k)): str(v)
            for k, v in dict(mutation).items()
        }
        out += ["~pbt.mutation", f"+pbt.mutation={format_value(scheme)}"]
    return out
