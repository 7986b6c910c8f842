"""Assets of Isaac Lab tasks: checked before the simulation starts, and a local cartpole for CPU tests.

Isaac Lab's stock tasks name USD files on NVIDIA's asset servers (Nucleus or its S3 mirror); when
those cannot be reached, building the scene waits about a minute before a bare FileNotFoundError.
:func:`check_assets` tries each file first (a few seconds at most) and names the override that
replaces it. ``python -m pbt.tasks.isaaclab_assets cartpole DIR`` writes a cartpole with Isaac
Lab's joint names, from the ``newton`` wheel, into DIR and prints its path. No torch here.
"""

import importlib.util
import logging
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

from pbt.errors import TaskError

log = logging.getLogger(__name__)

NEWTON_CARTPOLE = "examples/assets/cartpole_single_pendulum.usda"


def _children(obj: Any) -> Iterator[Tuple[str, Any]]:
    if isinstance(obj, dict):
        yield from ((str(k), v) for k, v in obj.items())
        return
    for name in getattr(obj, "__dataclass_fields__", None) or ():
        try:
            yield name, getattr(obj, name)
        except Exception:  # a lazily resolved field that cannot resolve yet: not an asset
            continue


def _walk(obj: Any, prefix: str = "", depth: int = 0) -> Iterator[Tuple[str, Any, Any]]:
    """(dotted path, owner, value) for every field of a config tree (Isaac Lab configclasses)."""
    if depth > 8:
        return
    for name, value in _children(obj):
        path = f"{prefix}.{name}" if prefix else name
        yield path, obj, value
        if isinstance(value, dict) or hasattr(value, "__dataclass_fields__"):
            yield from _walk(value, path, depth + 1)


def asset_paths(cfg: Any) -> List[Tuple[str, str, str]]:
    """(dotted field, file, config class name) of every ``usd_path`` in the env config."""
    return [
        (path, str(value), type(owner).__name__)
        for path, owner, value in _walk(cfg)
        if path.rsplit(".", 1)[-1] == "usd_path" and isinstance(value, str) and value
    ]


def use_ground_cuboid(cfg: Any) -> int:
    """Replace every ground plane (``GroundPlaneCfg``, a USD from NVIDIA's servers) in the scene by a
    50 m x 50 m collision cuboid; returns how many were replaced."""
    import isaaclab.sim as sim_utils

    replaced = 0
    for path, owner, value in list(_walk(getattr(cfg, "scene", None))):
        if isinstance(value, sim_utils.GroundPlaneCfg) and path.endswith("spawn"):
            cuboid = sim_utils.CuboidCfg(size=(50.0, 50.0, 0.1), collision_props=sim_utils.UsdPhysicsCollisionCfg())
            owner.spawn = cuboid
            init = getattr(owner, "init_state", None)
            if init is not None and hasattr(init, "pos"):
                init.pos = (0.0, 0.0, -0.05)  # the cuboid's top face where the plane was
            replaced += 1
            log.info("scene.%s: ground plane replaced by a collision cuboid", path)
    return replaced


def _reachable(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def check_assets(cfg: Any, timeout: float = 5.0) -> None:
    """TaskError naming each asset that cannot be read, and the override that replaces it."""
    missing: List[str] = []
    checked_hosts: Dict[str, bool] = {}
    for path, file, owner in asset_paths(cfg):
        if "://" in file:
            scheme, _, rest = file.partition("://")
            if scheme not in ("http", "https"):
                log.info("asset %s (%s) is not checked before the simulation starts", file, path)
                continue
            host = rest.split("/", 1)[0]
            if checked_hosts.get(host) is False:
                ok = False
            else:
                ok = _reachable(file, timeout)
                checked_hosts[host] = ok or checked_hosts.get(host, False)
        else:
            ok = Path(file).expanduser().is_file()
        if not ok:
            fix = (
                "task.groundCuboid=true (a collision cuboid instead of the ground plane)"
                if owner == "GroundPlaneCfg"
                else f"task.env.{path}=/path/to/a/local/copy.usd"
            )
            missing.append(f"  {path} = {file}\n    replace it with: {fix}")
    if missing:
        raise TaskError(
            "Isaac Lab assets that cannot be read (Isaac Lab would wait about a minute, then fail):\n"
            + "\n".join(missing)
            + "\nPoint them at a local copy (your Nucleus server's files, or a copy on disk; docs/isaaclab.md), "
            "or set task.checkAssets=false to let Isaac Lab fetch them itself."
        )


def newton_cartpole_source() -> Path:
    """The cartpole USD shipped in the ``newton`` wheel (Isaac Lab's joint names)."""
    spec = importlib.util.find_spec("newton")
    if spec is None or not spec.submodule_search_locations:
        raise TaskError("The newton package is not installed (it comes with isaaclab==3.0.0).")
    source = Path(next(iter(spec.submodule_search_locations))) / NEWTON_CARTPOLE
    if not source.is_file():
        raise TaskError(
            f"{source}: not in this newton wheel; a cartpole USD with joints slider_to_cart and cart_to_pole is needed."
        )
    return source


def write_newton_cartpole(dest_dir: Path) -> Path:
    """Write the newton cartpole into ``dest_dir`` with its defaultPrim naming the prim it has
    (the wheel's says ``cartPole``, its prim is ``cartpole``: Newton's importer rejects that)."""
    text = newton_cartpole_source().read_text()
    prims = re.findall(r'^def\s+\w*\s*"(\w+)"', text, flags=re.M)
    if not prims:
        raise TaskError(f"{newton_cartpole_source()}: no root prim found")
    fixed, count = re.subn(r'defaultPrim\s*=\s*"\w+"', f'defaultPrim = "{prims[0]}"', text, count=1)
    if count != 1:
        raise TaskError(f"{newton_cartpole_source()}: no defaultPrim line to correct")
    dest = Path(dest_dir) / "cartpole.usda"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(fixed)
    return dest


def main(argv: List[str]) -> int:
    if len(argv) != 2 or argv[0] != "cartpole":
        print("usage: python -m pbt.tasks.isaaclab_assets cartpole DIR", file=sys.stderr)
        return 2
    print(write_newton_cartpole(Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
