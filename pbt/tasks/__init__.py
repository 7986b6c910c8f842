"""Tasks: the registry behind ``task=`` (:mod:`~pbt.tasks.registry`), the user-task interface
(:mod:`~pbt.tasks.base`), the Isaac Gym and envpool backends and the built-in tasks (Pendulum, Cartpole,
Reacher, on :class:`~pbt.tasks.vectask.VecTask`). Importing this package does not import torch: a
task's module is imported only when the task is built.
"""

from pbt.tasks.base import REQUIRED_ATTRIBUTES, Task, check_task_interface
from pbt.tasks.registry import (
    BUILTIN_TASKS,
    TaskRef,
    build_task,
    import_task_class,
    parse_task,
    prepare_backend,
    rewrite_task_overrides,
    valid_task_help,
)

__all__ = [
    "BUILTIN_TASKS",
    "REQUIRED_ATTRIBUTES",
    "Task",
    "TaskRef",
    "build_task",
    "check_task_interface",
    "import_task_class",
    "parse_task",
    "prepare_backend",
    "rewrite_task_overrides",
    "valid_task_help",
]
