"""Every byte the population writes: records, checkpoints, lineage, best copies, locks and heartbeats.

- :mod:`~pbt.storage.format`: the names of every file (the on-disk format);
- :mod:`~pbt.storage.backend`: the Store protocol; :mod:`~pbt.storage.local`: the POSIX store;
- :mod:`~pbt.storage.record`, :mod:`~pbt.storage.lineage`, :mod:`~pbt.storage.checkpoints`: what is
  stored and how it is (de)serialized;
- :mod:`~pbt.storage.reader` (read-only, for tools) and :mod:`~pbt.storage.workspace` (a member's
  writer), with :mod:`~pbt.storage.best`, :mod:`~pbt.storage.retention`, :mod:`~pbt.storage.liveness`.

Importing this package never imports torch (checkpoints import it when they are (de)serialized).
"""

from pbt.storage.backend import NotFound, Refused, Store
from pbt.storage.lineage import LineageEntry
from pbt.storage.local import LocalStore
from pbt.storage.reader import WorkspaceReader
from pbt.storage.record import Record
from pbt.storage.retention import RetentionPolicy
from pbt.storage.workspace import Workspace

__all__ = [
    "LineageEntry",
    "LocalStore",
    "NotFound",
    "Record",
    "Refused",
    "RetentionPolicy",
    "Store",
    "Workspace",
    "WorkspaceReader",
]
