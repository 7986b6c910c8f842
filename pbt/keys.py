"""Dotted config keys (``train.params.config.gamma``) over nested mappings, and their short names.

No torch, no hydra: runs on Python 3.8 with the standard library only.
"""

from difflib import get_close_matches
from typing import Any, Dict, List, Mapping, MutableMapping, Sequence, Tuple

from pbt.errors import ConfigError, did_you_mean

_MISSING = object()


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Flatten nested mappings into ``{"a.b.c": leaf}``. Lists and empty mappings are leaves."""
    flat: Dict[str, Any] = {}
    for key, value in mapping.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and len(value) > 0:
            flat.update(flatten(value, full))
        else:
            flat[full] = value
    return flat


def _lookup(mapping: Mapping[str, Any], parts: List[str]) -> Any:
    """Walk ``parts``; a key may itself contain dots, so the longest matching prefix wins."""
    for split in range(len(parts), 0, -1):
        key = ".".join(parts[:split])
        if key not in mapping:
            continue
        value = mapping[key]
        if split == len(parts):
            return value
        if isinstance(value, Mapping):
            found = _lookup(value, parts[split:])
            if found is not _MISSING:
                return found
    return _MISSING


def has_key(cfg: Mapping[str, Any], dotted_key: str) -> bool:
    """True when ``dotted_key`` names a value in the nested mapping ``cfg``."""
    return _lookup(cfg, dotted_key.split(".")) is not _MISSING


def get_by_key(cfg: Mapping[str, Any], dotted_key: str) -> Any:
    """Value at ``dotted_key`` (``"train.params.config.gamma"``) of a nested mapping."""
    value = _lookup(cfg, dotted_key.split("."))
    if value is _MISSING:
        raise missing_key_error(dotted_key, cfg)
    return value


def set_by_key(cfg: MutableMapping[str, Any], dotted_key: str, value: Any) -> None:
    """Set the existing key ``dotted_key`` of a nested mapping in place."""
    parts = dotted_key.split(".")
    if len(parts) > 1:
        parent = _lookup(cfg, parts[:-1])
        if isinstance(parent, MutableMapping) and parts[-1] in parent:
            parent[parts[-1]] = value
            return
    if dotted_key in cfg:
        cfg[dotted_key] = value
        return
    raise missing_key_error(dotted_key, cfg)


def missing_key_error(dotted_key: str, cfg: Mapping[str, Any], what: str = "") -> ConfigError:
    """ConfigError for a key absent from ``cfg``, naming the nearest existing keys."""
    flat = list(flatten(cfg))
    prefix = _existing_prefix(dotted_key, flat)
    hint = did_you_mean(dotted_key, _close_keys(dotted_key, prefix, flat))
    if not hint and prefix:
        siblings = sorted(k for k in flat if k.startswith(prefix))[:8]
        hint = " Keys next to it: " + ", ".join(f"'{k}'" for k in siblings) + "."
    subject = what or f"Config key '{dotted_key}'"
    return ConfigError(
        f"{subject} does not exist in the config.{hint} Fix the key, or add the parameter to the config."
    )


def _existing_prefix(dotted_key: str, flat: List[str]) -> str:
    """The longest ``a.b.`` prefix of ``dotted_key`` under which the config has keys ('' if none)."""
    parts = dotted_key.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:depth]) + "."
        if any(k.startswith(prefix) for k in flat):
            return prefix
    return ""


def _close_keys(dotted_key: str, prefix: str, flat: List[str]) -> List[str]:
    """Existing keys close to ``dotted_key``, comparing only the part after the shared prefix (long
    common prefixes would otherwise make every sibling look close)."""
    under = [k[len(prefix) :] for k in flat if k.startswith(prefix)]
    close = get_close_matches(dotted_key[len(prefix) :], under, n=3, cutoff=0.6)
    return [prefix + k for k in close]


def short_keys(keys: Sequence[str]) -> Dict[str, str]:
    """Full config key -> short display name: the last dotted component, or more components
    where two keys would otherwise share a name (``train.params.config.gamma`` -> ``gamma``;
    ``...reward_shaper.scale_value`` -> ``scale_value``): each key's shortest suffix no other key
    ends with (the whole key when there is none). Linear in the keys' total length (keys come
    from workspace files, which may hold thousands of components)."""
    unique = list(dict.fromkeys(keys))
    parts = {key: key.split(".") for key in unique}
    counts: Dict[Tuple[int, str], int] = {}  # (trie node, component) -> keys through that edge
    nodes: Dict[Tuple[int, str], int] = {}
    for key in unique:
        node = 0
        for part in reversed(parts[key]):
            edge = (node, part)
            counts[edge] = counts.get(edge, 0) + 1
            node = nodes.setdefault(edge, len(nodes) + 1)
    names: Dict[str, str] = {}
    for key in unique:
        node, depth = 0, 0
        for part in reversed(parts[key]):
            edge = (node, part)
            depth += 1
            if counts[edge] == 1:
                break
            node = nodes[edge]
        names[key] = ".".join(parts[key][-depth:])
    return names
