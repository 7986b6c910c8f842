"""Which installed packages a test module needs to be imported, read statically from its source.

A test module is *core* when importing it needs nothing beyond the standard library and what
scripts/test_py38.sh installs (pytest, PyYAML, hypothesis): its own imports, and those of the
project modules and test helpers it imports, recursively. Only what runs at import counts: the
module body (function bodies are not), minus ``if TYPE_CHECKING:`` blocks and imports guarded by
``try:`` (optional ones); a module-level ``pytest.importorskip("x")`` needs ``x``.

Static, so it answers the same on Python 3.8 without torch as on 3.11 with it: tests/tiers.py marks
the core tests with it, and without torch collects only the core modules (the Python 3.8 leg).
"""
import ast
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
PROJECT_PACKAGES = ("pbt", "launcher", "experiments")
CORE_PACKAGES = frozenset({"pytest", "_pytest", "yaml", "hypothesis"})
"""What scripts/test_py38.sh installs besides the standard library."""

_STDLIB_DIR = os.path.normcase(sysconfig.get_paths()["stdlib"])


def is_stdlib(name: str) -> bool:
    names = getattr(sys, "stdlib_module_names", None)  # Python >= 3.10
    if names is not None:
        return name in names
    if name in sys.builtin_module_names:
        return True
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return False
    origin = os.path.normcase(spec.origin)
    return spec.origin == "frozen" or (origin.startswith(_STDLIB_DIR) and "site-packages" not in origin)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _importorskip(node: ast.AST) -> Optional[str]:
    """``x`` of a ``pytest.importorskip("x")`` call, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "importorskip"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def _import_time_statements(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run on import: into if/else, with and class bodies; not into function
    bodies, ``if TYPE_CHECKING:`` or ``try:`` bodies (their imports are optional)."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_time_statements(node.body)
            yield from _import_time_statements(node.orelse)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _import_time_statements(node.body)
        elif isinstance(node, ast.Try):
            yield from _import_time_statements(node.finalbody)


def imported_names(path: Path) -> Set[str]:
    """Dotted names the module imports on import (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package_of(path)
    names: Set[str] = set()
    for node in _import_time_statements(tree.body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: max(len(package.split(".")) - node.level + 1, 0)]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # maybe submodules
        for sub in ast.walk(node) if isinstance(node, (ast.Expr, ast.Assign)) else ():
            skipped = _importorskip(sub)
            if skipped:
                names.add(skipped)
    return {name for name in names if name}


def _package_of(path: Path) -> str:
    try:
        parts = list(path.resolve().relative_to(REPO).with_suffix("").parts)
    except ValueError:
        return ""
    return ".".join(parts[:-1])  # a package's __init__ and a plain module alike


def _local_files(name: str, importer: Path) -> Optional[List[Path]]:
    """The files importing ``name`` runs when it is the project's or a test helper (packages'
    ``__init__`` included), [] for a name below a project module that is not a module itself
    (``from pbt.x import SomeClass``), None when it is not ours."""
    parts = name.split(".")
    if parts[0] in PROJECT_PACKAGES:
        files = []
        for depth in range(1, len(parts) + 1):
            base = REPO.joinpath(*parts[:depth])
            if (base / "__init__.py").is_file():
                files.append(base / "__init__.py")
            elif base.with_suffix(".py").is_file():
                files.append(base.with_suffix(".py"))
            else:
                break
        return files
    for folder in (importer.parent, TESTS):  # test helpers (conftest, faults_util, ...): top-level modules
        candidate = folder / f"{parts[0]}.py"
        if candidate.is_file():
            return [candidate]
    return None


def needed_packages(path: Path, _cache: Optional[Dict[Path, Set[str]]] = None) -> Set[str]:
    """Top-level names of the non-standard packages importing ``path`` needs, core ones included."""
    cache: Dict[Path, Set[str]] = {} if _cache is None else _cache
    path = path.resolve()
    if path in cache:
        return cache[path]
    cache[path] = set()  # an import cycle adds nothing new
    needs: Set[str] = set()
    for name in imported_names(path):
        files = _local_files(name, path)
        if files is None:
            top = name.split(".")[0]
            if not is_stdlib(top):
                needs.add(top)
            continue
        for file in files:
            if file.resolve() != path:
                needs |= needed_packages(file, cache)
    cache[path] = needs
    return needs


def is_core(path: Path, cache: Optional[Dict[Path, Set[str]]] = None) -> bool:
    """Whether importing the test module needs no package beyond :data:`CORE_PACKAGES`."""
    return not (needed_packages(path, cache) - CORE_PACKAGES)
