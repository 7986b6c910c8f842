"""Restart a worker as itself (same PID) with new hyperparameters and a checkpoint.

A PBT member restarts by ``os.execv``: the PID stays, so a launcher (or Slurm) keeps tracking it.
The new command line is the worker's own Hydra overrides with the replaced keys dropped and the
new ``key=value`` overrides appended, so argv does not grow however many times a member restarts,
and the environment is left untouched.

Values are written so Hydra's override grammar reads them back exactly: floats via ``repr``,
booleans as ``true``/``false``, None as ``null``, strings quoted unless they are plain words.
:func:`format_value` is the project's one override formatter: the launcher writes its members'
commands with it too, so a launched and a restarted member spell a value the same way.
"""

import logging
import math
import os
import re
import sys
from typing import Any, Callable, List, Mapping, NoReturn, Optional, Sequence, Tuple, Union

from pbt.errors import ConfigError, PbtError

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]

CHECKPOINT_KEY = "checkpoint"
LEGACY_RESTARTED_KEY = "pbt.restarted"
"""Where older versions marked a re-executed worker on its argv; dropped from argv on a restart."""
RESTARTED_ENV = "PBT_RESTARTED"
"""Set to "1" in the environment of a re-executed worker (internal state, not a config key)."""
RUN_DIR_KEY = "hydra.run.dir"
DEFAULT_MODULE = "pbt.train"

_PREFIXES = ("++", "+", "~")  # longest first
_BARE_STRING_RE = re.compile(r"[A-Za-z_/][A-Za-z0-9_./\-]*")
_HYDRA_KEYWORDS = frozenset(["true", "false", "null", "nan", "inf"])  # case-insensitive in Hydra
_FLAGS_WITH_VALUE = frozenset(
    ["-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir", "--experimental-rerun"]
)
_MAX_ARG_BYTES = 131072  # Linux MAX_ARG_STRLEN: the longest single argument execve accepts


class RestartError(PbtError):
    """The worker could not be restarted (argv too long, exec failed)."""


# --------------------------------------------------------------------------------------------
# Formatting values for Hydra's override grammar
# --------------------------------------------------------------------------------------------


def _quote(text: str) -> str:
    """Single-quote ``text`` for Hydra; the result reads back as ``text`` after OmegaConf.

    Hydra: inside quotes, escape the quote as ``\\'`` and double the backslashes that precede a
    quote (or the closing quote). OmegaConf: a literal ``${`` is written ``\\${`` and backslashes
    before it are doubled, or OmegaConf would resolve it as an interpolation.
    """
    out: List[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            j = i
            while j < n and text[j] == "\\":
                j += 1
            run = j - i
            if j == n or text[j] == "'":
                out.append("\\" * (2 * run))  # Hydra: backslashes before a quote are escaped
            elif text.startswith("${", j):
                out.append("\\" * (2 * run))  # OmegaConf: backslashes before ${ are escaped
            else:
                out.append("\\" * run)
            i = j
            continue
        if ch == "'":
            out.append("\\'")
        elif text.startswith("${", i):
            out.append("\\$")
        else:
            out.append(ch)
        i += 1
    return "'" + "".join(out) + "'"


def _format_string(text: str) -> str:
    if _BARE_STRING_RE.fullmatch(text) and text.lower() not in _HYDRA_KEYWORDS:
        return text
    return _quote(text)


def _plain_scalar(value: Any) -> Any:
    """numpy scalars to Python scalars (numpy's float64 repr is 'np.float64(...)' in numpy 2)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic):
        return value.item()
    return value


def format_value(value: Any) -> str:
    """The Hydra override text for ``value`` (bool, int, float, str, None, list/tuple, dict)."""
    value = _plain_scalar(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        number = float(value)
        if math.isnan(number):
            return "nan"
        return repr(number)  # 'inf', '-inf', '1e-05', '0.1': all exact in Hydra's grammar
    if isinstance(value, str):
        return _format_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = []
        for key, sub in value.items():
            if not isinstance(key, str) or not _BARE_STRING_RE.fullmatch(key) or key.lower() in _HYDRA_KEYWORDS:
                raise ConfigError(
                    f"cannot write dict key {key!r} in a Hydra override (keys cannot be quoted); "
                    "use keys made of letters, digits, '_', '-', '.', '/'"
                )
            items.append(f"{key}:{format_value(sub)}")
        return "{" + ",".join(items) + "}"
    raise ConfigError(
        f"cannot write a value of type {type(value).__name__} ({value!r}) as a Hydra override; "
        "use bool, int, float, str, None, lists or dicts"
    )


def split_override_key(arg: str) -> Tuple[str, str]:
    """(prefix, key) of a Hydra override: ``'++a.b=1'`` -> ``('++', 'a.b')``, ``'~a'`` -> ``('~', 'a')``."""
    head = arg.split("=", 1)[0]
    for prefix in _PREFIXES:
        if head.startswith(prefix):
            return prefix, head[len(prefix) :]
    return "", head


def _check_key(key: str) -> Tuple[str, str]:
    prefix, bare = split_override_key(key)
    if not bare or "=" in key or any(ch.isspace() for ch in key) or key.startswith("-"):
        raise ConfigError(
            f"{key!r} is not a Hydra config key; use a dotted key such as "
            "'train.params.config.gamma' (optionally prefixed with '+' or '++')"
        )
    return prefix, bare


def format_override(key: str, value: Any) -> str:
    """A Hydra command-line override ``key=value`` that Hydra reads back as exactly ``value``."""
    _check_key(key)
    return f"{key}={format_value(value)}"


# --------------------------------------------------------------------------------------------
# Rebuilding argv
# --------------------------------------------------------------------------------------------


def build_restart_argv(
    argv: Sequence[str],
    overrides: Mapping[str, Any],
    checkpoint: Optional[PathLike],
    run_dir: Optional[PathLike] = None,
) -> List[str]:
    """The worker's Hydra overrides (``sys.argv[1:]``) rewritten for a restart.

    Drops every override of a key in ``overrides`` (matching the key before the first '=',
    ignoring a leading '+', '++' or '~'), and any ``checkpoint=`` (and an older version's
    ``pbt.restarted=``); then appends ``checkpoint=<absolute path>`` and the new overrides, in that
    order (that the worker was re-executed is said by :data:`RESTARTED_ENV`, not by argv). With ``run_dir``, ``hydra.run.dir=`` overrides are replaced by ``hydra.run.dir=<run_dir>``
    so the restarted process logs to the same directory; without it an existing one is kept.
    With ``checkpoint=None`` (e.g. the initial mutation of a fresh member) existing ``checkpoint=``
    overrides are kept and none is added. A key that was added with '+' or '++' is re-added with
    '++'. Flags (``--multirun``, ``-cn name``, ...) are kept as they are.

    Because every appended key is dropped first, argv keeps a constant length over restarts.
    """
    dropped = set()
    for key in overrides:
        _, bare = _check_key(key)
        if bare in dropped:
            raise ConfigError(f"override key {bare!r} is given twice (with different prefixes); give it once")
        if bare in (CHECKPOINT_KEY, LEGACY_RESTARTED_KEY, RUN_DIR_KEY):
            raise ConfigError(
                f"{bare!r} is set by build_restart_argv itself; pass it as the checkpoint/run_dir argument"
            )
        dropped.add(bare)
    dropped.add(LEGACY_RESTARTED_KEY)
    if checkpoint is not None:
        dropped.add(CHECKPOINT_KEY)
    if run_dir is not None:
        dropped.add(RUN_DIR_KEY)

    kept: List[str] = []
    added_with_plus = set()
    flag_value_next = False
    for arg in argv:
        if flag_value_next or arg.startswith("-") or ("=" not in arg and not arg.startswith("~")):
            # a flag (--multirun, --config-name=x), a flag's value (-cn x), or not an override
            flag_value_next = arg in _FLAGS_WITH_VALUE
            kept.append(arg)
            continue
        prefix, key = split_override_key(arg)
        if key in dropped:
            if prefix in ("+", "++"):
                added_with_plus.add(key)
            continue
        kept.append(arg)

    def emit(key: str, value: Any) -> str:
        prefix, bare = split_override_key(key)
        if not prefix and bare in added_with_plus:
            prefix = "++"
        return format_override(prefix + bare, value)

    if checkpoint is not None:
        kept.append(emit(CHECKPOINT_KEY, os.path.abspath(os.fspath(checkpoint))))
    if run_dir is not None:
        kept.append(emit(RUN_DIR_KEY, os.path.abspath(os.fspath(run_dir))))
    for key, value in overrides.items():
        kept.append(emit(key, value))
    return kept


# --------------------------------------------------------------------------------------------
# Exec
# --------------------------------------------------------------------------------------------


def is_restarted() -> bool:
    """True in a worker that :func:`exec_restart` re-executed (it keeps its state: no initial
    mutation, no resume from the workspace)."""
    return os.environ.get(RESTARTED_ENV) == "1"


def _flush_logging() -> None:
    loggers: List[logging.Logger] = [logging.getLogger()]
    loggers.extend(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger))
    for log in loggers:
        for handler in log.handlers:
            try:
                handler.flush()
            except Exception as exc:  # a broken handler must not stop the restart
                sys.stderr.write(f"pbt.restart: flushing log handler {handler!r} failed: {exc!r}\n")


def _check_exec_size(command: Sequence[str]) -> None:
    """Fail with a clear message instead of execv's E2BIG when argv would be too long."""
    too_long = [arg[:60] for arg in command if len(os.fsencode(arg)) >= _MAX_ARG_BYTES]
    if too_long:
        raise RestartError(
            f"cannot restart: argument(s) {too_long} exceed {_MAX_ARG_BYTES} bytes; shorten the override"
        )
    try:
        arg_max = os.sysconf("SC_ARG_MAX")
    except (ValueError, OSError, AttributeError):
        return  # no limit to check against on this platform
    env_bytes = sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in os.environ.items())
    argv_bytes = sum(len(os.fsencode(arg)) + 1 for arg in command)
    if arg_max > 0 and argv_bytes + env_bytes + 4096 > arg_max:
        raise RestartError(
            f"cannot restart: argv ({argv_bytes} bytes) plus environment ({env_bytes} bytes) exceed "
            f"the system limit ARG_MAX={arg_max}; drop unneeded overrides or environment variables"
        )


def exec_restart(
    argv: Sequence[str], before_exec: Sequence[Callable[[], None]] = (), module: str = DEFAULT_MODULE
) -> NoReturn:
    """Replace this process (same PID) by ``python -m <module> <argv...>``.

    Runs ``before_exec`` callbacks first (e.g. flush and close TensorBoard writers; a failing
    callback is logged and the restart goes on), flushes logging handlers and stdio, then calls
    ``os.execv``. The environment is passed on with :data:`RESTARTED_ENV` set. Raises RestartError when argv is too long
    or exec fails; it never returns otherwise.
    """
    executable = sys.executable
    if not executable:
        raise RestartError("cannot restart: sys.executable is unknown (embedded interpreter?)")
    command = [executable, "-m", module, *argv]
    _check_exec_size(command)
    for callback in before_exec:
        try:
            callback()
        except Exception:  # the restart matters more than a failed flush; keep the traceback
            logger.warning("before-restart callback %r failed; restarting anyway", callback, exc_info=True)
    logger.info("restarting (pid %d): %s", os.getpid(), " ".join(command))
    _flush_logging()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.environ[RESTARTED_ENV] = "1"
    try:
        os.execv(executable, command)
    except OSError as exc:
        raise RestartError(f"os.execv({executable!r}, ...) failed: {exc}; the worker keeps running") from exc
    raise RestartError("os.execv returned")  # pragma: no cover - execv never returns
