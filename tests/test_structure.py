"""The structure the project promises contributors (docs/architecture.md): no import cycles, small
modules and classes, one implementation of each shared mechanism, no reference to documents outside
the repository. Static checks over the source: no torch, runs on Python 3.8."""
import ast
import io
import tokenize
import re
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

from conftest import REPO

PACKAGES = ("pbt", "launcher")
MAX_MODULE_LINES = 600  # lines a formatter wraps a statement onto count once (wrapped_lines)
MAX_CLASS_LINES = 300


def modules() -> Dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages."""
    found: Dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every import statement, at any depth (lazy imports in functions count), except those under
    ``if TYPE_CHECKING:``."""
    stack: List[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> Dict[str, Set[str]]:
    mods = modules()
    graph: Dict[str, Set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in mods else base)
            graph[name].update(t for t in targets if t in mods and t != name)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle as a list of modules (first == last), or [] when there is none."""
    state: Dict[str, int] = {}
    path: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return []


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "pbt.member" in graph and graph["pbt.member"], "the graph must see the project's imports"
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def wrapped_lines(text: str) -> Set[int]:
    """Physical lines that only continue a bracketed expression begun above (an argument per line,
    a closing bracket): how a formatter wraps a call is not size, so sizes leave them out. Lines of
    strings and comments count."""
    depth, wrapped, line_seen = 0, set(), 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        row = token.start[0]
        if row != line_seen:
            line_seen = row
            if depth > 0 and token.type not in (tokenize.STRING, tokenize.COMMENT):
                wrapped.add(row)
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
    return wrapped


def _sizes() -> Iterator[Tuple[str, str, int]]:
    for name, path in modules().items():
        text = path.read_text()
        wrapped = wrapped_lines(text)
        yield "module", name, len(text.splitlines()) - len(wrapped)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                end: int = node.end_lineno  # type: ignore[assignment]
                span = range(node.lineno, end + 1)
                yield "class", f"{name}.{node.name}", len(span) - len(wrapped.intersection(span))


def test_wrapping_is_not_size() -> None:
    one = "x = f(a, b)\n"
    wrapped = 'x = f(\n    a,\n    b,\n)\ny = """\ndoc\n"""  # a string counts\n'
    assert wrapped_lines(one) == set() and wrapped_lines(wrapped) == {2, 3, 4}


def test_no_module_or_class_is_too_large() -> None:
    limits = {"module": MAX_MODULE_LINES, "class": MAX_CLASS_LINES}
    too_large = [f"{kind} {name}: {lines} lines (limit {limits[kind]})" for kind, name, lines in _sizes()
                 if lines > limits[kind]]
    assert not too_large, "split these:\n" + "\n".join(too_large)


def _sources() -> Dict[str, str]:
    return {name: path.read_text() for name, path in modules().items()}


def _defining(pattern: str) -> List[str]:
    regex = re.compile(pattern, re.MULTILINE)
    return sorted(name for name, text in _sources().items() if regex.search(text))


def test_one_implementation_of_each_shared_mechanism() -> None:
    assert _defining(r"^def format_value\(") == ["pbt.restart"], "one Hydra override formatter"
    assert _defining(r"[\"'/]proc[/\"']") == ["pbt.procfs"], "one /proc parser"
    assert _defining(r"O_EXCL") == ["pbt.storage.local"], "one exclusive-create (lock) implementation"
    assert _defining(r"^def read_heartbeat\(") == ["pbt.storage.liveness"], "one heartbeat reader"
    assert _defining(r"^class LineageEntry\b") == ["pbt.storage.lineage"], "one lineage entry type"


def test_nothing_refers_to_documents_outside_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=str(REPO),
                             capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = REPO / name
        if name == "tests/test_structure.py" or not path.is_file() or path.suffix in (".png", ".pth", ".json"):
            continue
        text = path.read_text(errors="replace")
        if "DESIGN.md" in text or "../shared" in text:
            offenders.append(name)
    assert not offenders, f"these cite documents outside the repository: {offenders}"


# The layer table of docs/architecture.md, top to bottom: a module imports only from its own layer
# or the layers below it. "pkg.*" is a package with every module in it; other names are one module.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    ("entry points", ("pbt", "pbt.train", "pbt.status", "pbt.analyze", "pbt.play", "pbt.replay", "pbt.api",
                      "pbt.overrides", "launcher.*")),
    ("launcher", ("pbt.launcher.*",)),
    ("tools", ("pbt.tools.*",)),
    ("rl_games glue", ("pbt.rl_games.*",)),
    ("tasks", ("pbt.tasks.*",)),
    ("member", ("pbt.member", "pbt.peers", "pbt.write_errors", "pbt.iteration", "pbt.restart", "pbt.pacing",
                "pbt.elastic", "pbt.objective")),
    ("config", ("pbt.config", "pbt.resolvers", "pbt.groups")),
    ("curriculum", ("pbt.curriculum.*",)),
    ("selection", ("pbt.selection.*",)),
    ("mutation", ("pbt.mutation.*",)),
    ("storage", ("pbt.storage.*",)),
    ("basics", ("pbt.errors", "pbt.sections", "pbt.keys", "pbt.procfs", "pbt.devices")),
]
# (importer, imported) -> why an import may go up. None today; name each one added, with its reason.
UPWARD_IMPORTS: Dict[Tuple[str, str], str] = {}


def _in(module: str, entry: str) -> bool:
    return module == entry[:-2] or module.startswith(entry[:-1]) if entry.endswith(".*") else module == entry


def layer_of(module: str) -> List[int]:
    """The indices of the layers whose entries name ``module`` (exactly one for every module)."""
    return [i for i, (_, entries) in enumerate(LAYERS) for entry in entries if _in(module, entry)]


def test_every_module_is_in_exactly_one_layer() -> None:
    misplaced = {name: [LAYERS[i][0] for i in layer_of(name)] for name in modules() if len(layer_of(name)) != 1}
    assert not misplaced, f"give each module one layer in LAYERS (and docs/architecture.md): {misplaced}"


def test_imports_only_go_down_the_layers() -> None:
    upward = []
    for importer, imported in sorted((a, b) for a, targets in import_graph().items() for b in targets):
        (low,), (high,) = layer_of(importer), layer_of(imported)
        if high < low and (importer, imported) not in UPWARD_IMPORTS:
            upward.append(f"{importer} ({LAYERS[low][0]}) imports {imported} ({LAYERS[high][0]})")
    assert not upward, "imports go down the layer table of docs/architecture.md:\n" + "\n".join(upward)
    assert set(UPWARD_IMPORTS) <= {(a, b) for a, bs in import_graph().items() for b in bs}, "stale exceptions"


def test_the_layer_table_is_the_documented_one() -> None:
    text = (REPO / "docs" / "architecture.md").read_text().split("\n## Layers\n")[1].split("\n## ")[0]
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [name for name, _ in LAYERS], "docs/architecture.md's layer table lists these layers in order"


def test_layer_of_reads_packages_and_modules() -> None:
    assert layer_of("pbt.storage.record") == [10] and layer_of("pbt.member") == [5] and layer_of("pbt") == [0]
    assert layer_of("pbt.storage") == [10] and layer_of("pbt.storageX") == []
