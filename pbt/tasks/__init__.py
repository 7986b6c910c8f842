"""Built-in vectorized tasks, written in torch (import path strings: importing this package does not
import torch; a task's module is imported only when the task is built)."""
from typing import Dict

#: Built-in task name (the value of ``task=``) -> "module:Class".
BUILTIN_TASKS: Dict[str, str] = {
    "Pendulum": "pbt.tasks.pendulum:Pendulum",
    "Cartpole": "pbt.tasks.cartpole:Cartpole",
    "Reacher": "pbt.tasks.reacher:Reacher",
}
