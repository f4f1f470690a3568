"""The package's layout shows the flow: each sub-package imports only from those before it
(settings -> state -> gateways -> preflight -> dataset -> training -> upload -> runtime), and
the CLI sits on top."""

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "entrypoint"
LAYERS = ["errors", "atomic", "settings", "state", "gateways", "preflight", "dataset",
          "training", "upload", "runtime", "cli", "plan", "__main__"]  # fmt: skip
RANK = {name: rank for rank, name in enumerate(LAYERS)}
RANK["atomic"] = RANK["errors"]  # the foundations, side by side
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
