"""The package's layout shows the flow: each sub-package imports only from those before it
(settings -> state -> gateways -> preflight -> dataset -> training -> upload -> runtime), and
the CLI sits on top."""

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "entrypoint"
LAYERS = ["errors", "files", "settings", "state", "gateways", "preflight", "dataset",
          "training", "upload", "runtime", "cli", "plan", "__main__"]  # fmt: skip
RANK = {name: rank for rank, name in enumerate(LAYERS)}
RANK["files"] = RANK["errors"]  # the foundations, side by side
RANK["plan"] = RANK["__main__"] = RANK["cli"]
RANK["__init__"] = RANK["errors"]


def layer(dotted: str) -> str:
    """``entrypoint.state.store`` -> ``state``; ``entrypoint.errors`` -> ``errors``."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "errors"  # ``from entrypoint import __version__``


def imports(module: Path) -> list[tuple[int, str]]:
    """Every trainbox module a module imports, at its top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "entrypoint":
                found += [(node.lineno, f"entrypoint.{alias.name}") for alias in node.names]
            elif node.module.startswith("entrypoint."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("entrypoint.")]
        assert not (isinstance(node, ast.ImportFrom) and node.level), f"{module}: relative import"
    return found


def test_imports_only_go_down_the_flow() -> None:
    upward = []
    for module in sorted(PACKAGE.rglob("*.py")):
        own = layer(".".join(module.relative_to(REPO).with_suffix("").parts))
        for line, target in imports(module):
            name = layer(target) if target != "entrypoint.__version__" else "errors"
            if RANK.get(name, 0) > RANK[own]:
                upward.append(f"{module.relative_to(REPO)}:{line}: {own} imports {target}")
    assert not upward, "\n".join(upward)


def test_every_module_has_its_place() -> None:
    for module in sorted(PACKAGE.rglob("*.py")):
        parts = module.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] != "__init__":
            assert parts[0] in RANK, f"{module}: a sub-package the flow does not name"


# -- What only the runtime may do, and what no module keeps --------------------------------

STARTS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv",
           "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv",
           "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe"},
    "multiprocessing": {"Process", "Pool", "get_context"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
}  # fmt: skip
CONTAINERS = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
MAKERS = {"list", "dict", "set", "defaultdict", "deque", "OrderedDict", "Counter"}
MUTATORS = {"append", "extend", "insert", "remove", "pop", "popitem", "clear", "update",
            "setdefault", "add", "discard", "sort", "reverse"}  # fmt: skip


def process_starts(source: str) -> list[tuple[int, str]]:
    """Every call that starts a process: ``subprocess.run``, ``os.execv`` ..., also when the
    function was imported by name (``from subprocess import run``)."""
    tree = ast.parse(source)
    named = {alias.asname or alias.name: f"{node.module}.{alias.name}"
             for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
             for alias in node.names}  # fmt: skip
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        name = named.get(name, name)
        module, _, attr = name.rpartition(".")
        if attr in STARTS.get(module.rpartition(".")[2] if module else "", set()):
            found.append((node.lineno, name))
    return found


def module_state(source: str) -> list[tuple[int, str]]:
    """Module-level state a process changes as it runs: a ``global`` rebinding, a lowercase
    name bound to a list, dict or set at the module's top, or a constant container that the
    module itself mutates."""
    tree = ast.parse(source)
    found = [(n.lineno, f"global {', '.join(n.names)}") for n in ast.walk(tree)
             if isinstance(n, ast.Global)]  # fmt: skip
    top: dict[str, int] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])  # fmt: skip
        value = getattr(node, "value", None)
        container = isinstance(value, CONTAINERS) or (
            isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in MAKERS
        )
        for target in targets:
            if isinstance(target, ast.Name) and container:
                top[target.id] = node.lineno
                if not target.id.isupper():
                    found.append((node.lineno, f"{target.id} = a container"))
    for node in ast.walk(tree):
        changed = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name):
                changed = node.func.value.id
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = [node.target] if isinstance(node, ast.AugAssign) else node.targets
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    changed = target.value.id
        if changed in top and changed.isupper():
            found.append((node.lineno, f"{changed} changed"))
    return sorted(found)


def test_only_the_runtime_starts_processes() -> None:
    """One stage owns every process: ``runtime`` (the job's children, supervisord's programs,
    the one-off tools). A module elsewhere that needs a tool's answer gets it from there."""
    outside = [f"{module.relative_to(REPO)}:{line}: {name}"
               for module in sorted(PACKAGE.rglob("*.py"))
               if module.relative_to(PACKAGE).parts[0] != "runtime"
               for line, name in process_starts(module.read_text())]  # fmt: skip
    assert not outside, "\n".join(outside)
    inside = [name for module in sorted((PACKAGE / "runtime").glob("*.py"))
              for _, name in process_starts(module.read_text())]  # fmt: skip
    assert {"subprocess.run", "subprocess.Popen", "os.execv"} <= set(inside)  # it sees them
    caught = process_starts(
        "import subprocess, os\nfrom subprocess import check_output as co\n"
        "subprocess.run(['a'])\nos.execv('a', ['a'])\nco(['a'])\nos.path.join('a')\n"
    )
    assert caught == [(3, "subprocess.run"), (4, "os.execv"), (5, "subprocess.check_output")]


def test_no_module_keeps_state_of_its_own() -> None:
    """A process's state lives in objects it builds once and passes down (``state.run``), not
    in a module: nothing to reset between tests, nothing set by one caller for another."""
    kept = [f"{module.relative_to(REPO)}:{line}: {what}"
            for module in sorted(PACKAGE.rglob("*.py"))
            for line, what in module_state(module.read_text())]  # fmt: skip
    assert not kept, "\n".join(kept)
    caught = module_state(
        "listeners: list = []\n_until = {}\nNAMES = ('a',)\nTABLE = {'a': 1}\nCACHE = {}\n"
        "def f():\n    global _rank\n    CACHE['k'] = 1\n    TABLE.get('a')\n"
    )
    assert caught == [(1, "listeners = a container"), (2, "_until = a container"),
                      (7, "global _rank"), (8, "CACHE changed")]  # fmt: skip


WHOLE_CONFIG_AT_MOST = 20  # issue 54: functions below the runtime take what they use


def takes_the_whole_config() -> list[str]:
    """``file:function`` for each function outside ``runtime/`` and ``cli.py`` with a parameter
    annotated ``Config`` (methods on ``self`` are the config's own)."""
    found = []
    for module in sorted(PACKAGE.rglob("*.py")):
        where = module.relative_to(PACKAGE).as_posix()
        if where.startswith("runtime/") or where == "cli.py":
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                kinds = {ast.unparse(p.annotation).strip("'\"") for p in params if p.annotation}
                if "Config" in kinds:
                    found.append(f"{where}:{node.name}")
    return found


def test_below_the_runtime_functions_take_what_they_use() -> None:
    """A stage gets a path, a rank, a repo, a price, or its own small record of the settings it
    reads (``dataset.wanted.Wanted``, ``upload.uploader.Uploads``, ``distributed.Meeting``),
    built at its door; the runtime and the CLI alone hold the whole ``Config``."""
    found = takes_the_whole_config()
    assert "dataset/wanted.py:of" in found  # the counter sees a record's door
    assert len(found) <= WHOLE_CONFIG_AT_MOST, "\n".join(found)
