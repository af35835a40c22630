"""The package layout keeps its rules (docs/architecture.md): read from the imports of every module in src/plm.

Only imports at a module's top level count: an import inside a function (loaded where it is used, to keep
the command's start-up fast) creates no cycle at import time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
FAMILIES = ("gpt", "bert", "albert", "deberta", "elmo", "transformer", "rnn")  # plm.models.<family>


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted((SRC / "plm").rglob("*.py"))}


def imports(module: str, top_level_only: bool = True) -> set[str]:
    """The plm modules (and any others) ``module`` imports.

    ``from plm.x import y`` is plm.x.y where that is a module.
    """
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in MODULES}
    return found


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_core_imports_no_family_and_no_model_package() -> None:
    for module in MODULES:
        if in_package(module, "plm.core") or in_package(module, "plm.cpu"):
            wrong = {name for name in imports(module, top_level_only=False) if in_package(name, "plm.models")}
            assert not wrong, f"{module} imports {wrong}"


@pytest.mark.parametrize("family", FAMILIES)
def test_no_family_imports_another(family: str) -> None:
    others = {f"plm.models.{other}" for other in FAMILIES if other != family}
    assert not imports(f"plm.models.{family}", top_level_only=False) & others


BELOW_EVERYTHING = ("plm.errors", "plm.lazy_exports", "plm.cache")  # modules that import nothing of plm


def test_the_cpu_routes_are_the_layer_below_the_core() -> None:
    """plm.core's linear layers and attention call plm.cpu; plm.cpu calls nothing above it (plm.errors,
    plm.lazy_exports and plm.cache, which import nothing of plm, are below it)."""
    for module in MODULES:
        if in_package(module, "plm.cpu"):
            above = {name for name in imports(module, top_level_only=False) if in_package(name, "plm")
                     and not in_package(name, "plm.cpu") and name not in BELOW_EVERYTHING}
            assert not above, (module, above)


def test_objectives_and_heads_import_no_family() -> None:
    families = {f"plm.models.{family}" for family in FAMILIES}
    for module in MODULES:
        if in_package(module, "plm.objectives") or module in ("plm.tasks.heads", "plm.models.pretraining_heads"):
            assert not imports(module, top_level_only=False) & families, module


def test_only_the_cli_imports_the_cli_and_nothing_imports_transformers() -> None:
    for module in MODULES:
        names = imports(module, top_level_only=False)
        if not in_package(module, "plm.cli"):
            assert not {name for name in names if in_package(name, "plm.cli")}, module
        assert not {name for name in names if in_package(name, "transformers")}, module


def test_no_import_cycles() -> None:
    graph = {module: {name for name in imports(module) if name in MODULES and name != module} for module in MODULES}
    # A package's __init__ that imports its own submodules is how a package is built, not a cycle.
    for module, names in graph.items():
        graph[module] = {name for name in names if not in_package(module, name)}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            pytest.fail("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for name in sorted(graph[module]):
            visit(name, [*path, module])
        done.add(module)

    for module in graph:
        visit(module, [])


def package_of(module: str) -> str | None:
    """The package directly under plm that holds ``module`` (None: a top-level module)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (SRC / "plm" / parts[1]).is_dir()) else None


def test_no_two_packages_import_each_other() -> None:
    """A layer imports only those below it: packages form no cycle, whichever of their modules import (a lazy
    import inside a function counts as much as one at the top)."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        package = package_of(module)
        if package is None:
            continue
        graph.setdefault(package, set())
        graph[package] |= {other for name in imports(module, top_level_only=False)
                           if name.startswith("plm.") and (other := package_of(name)) not in (None, package)}
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a in graph.get(b, ())})
    assert not pairs, "packages that import each other: " + ", ".join(f"{a}<->{b}" for a, b in pairs)


def test_the_top_level_holds_few_modules_and_no_name_is_used_twice() -> None:
    top = SRC / "plm"
    modules = sorted(path.stem for path in top.glob("*.py") if path.stem != "__init__")
    assert len(modules) <= 6, modules
    top_names = set(modules) | {path.name for path in top.iterdir() if (path / "__init__.py").is_file()}
    for package in (path for path in top.iterdir() if (path / "__init__.py").is_file()):
        if package.name in ("cli", "hf"):  # modules named after their subcommand, converters after their family
            continue
        inner = {path.stem for path in package.rglob("*.py")} | {
            path.name for path in package.rglob("*") if path.is_dir()
        }
        assert not inner & top_names, f"plm.{package.name} reuses top-level names {inner & top_names}"


# --steps, or the "--" of f"--{name}" (a flag built from a field's name); not a range (1--2) or an em dash
FLAG = re.compile(r"(?<![\w-])--(?:[a-z][a-z0-9-]*|$)")


def texts_outside_docstrings(path: Path) -> list[ast.Constant]:
    """The string constants of a module that are not docstrings: what it can say to a user."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_library_speaks_no_command_line() -> None:
    """Outside plm.cli, an error, warning or note names a config field (`steps`), never a flag (--steps): a Python
    user has no flag to pass. The command line prints each field as its flag (plm.cli.flags.in_flags)."""
    flags = [f"{module}:{node.lineno}: {', '.join(FLAG.findall(node.value))}"
             for module, path in MODULES.items() if not in_package(module, "plm.cli")
             for node in texts_outside_docstrings(path) if FLAG.search(node.value)]
    assert not flags, "library text that names flags:\n" + "\n".join(flags)
