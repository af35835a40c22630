"""The documentation cannot rot: the site builds in strict mode, every example a page (or the README) marks runnable
runs, and every ``plm ...`` line of the site and the README parses with plm's own parser, defaults included. The API
reference shows each package's public API (its ``__all__``) apart from its internals, and every name an example takes
from plm is in a public API.

A page marks a fenced block with an HTML comment on the line before it, which neither MkDocs nor GitHub shows:

- ``<!-- runnable -->`` before a ``sh`` block: each line is a ``plm`` command, run in-process (``<<< "text"``
  gives it standard input); before a ``python`` block: the block is executed.
- ``<!-- file: NAME -->`` before any block: its text is written to NAME, for the runnable blocks after it.

A page's blocks run in order, in one temporary directory that holds ``my.txt`` (the synthetic text of
``conftest.py``, documents separated by blank lines), so a later block reads what an earlier one wrote.
Nothing is substituted: a runnable example is written small enough (micro presets, a few steps) to run as is.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.util
import io
import math
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import plm
from plm.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
DOCUMENTS = [ROOT / "README.md", *PAGES]
# The workflow pages of the site, each to start with a runnable example (runs.md starts with a full-size run).
WORKFLOWS = ("install", "models", "tokenizers", "pretraining", "data", "finetuning", "seq2seq", "elmo", "zeroshot",
             "compare", "serve", "scaling", "huggingface", "architecture")

MARKER = re.compile(r"^<!-- (runnable|file: ([\w.-]+)) -->$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w-]*)")
SHELLS = ("sh", "bash", "shell", "console")
PLM_LINE = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(plm|torchrun)\s")  # env assignments, then the command
SHELL_OPERATORS = ("<<<", "<", ">", ">>", "|", "&&", "||", ";", "&")
DOCUMENTED_DEFAULT = re.compile(r"`(--[a-z][\w-]*)`[^`(\n]{0,24}\(default:? ([^\s,;)]+)")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its language, its text, its marker (``runnable``, ``file``) and where it starts."""

    language: str
    text: str
    marker: str | None
    file_name: str | None
    line: int


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order, with the marker on the line before each."""
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, language = opening.groups()
        start, body = index, []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            line = lines[index]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            index += 1
        index += 1
        previous = lines[start - 1].strip() if start else ""
        marker = MARKER.match(previous)
        found.append(Block(language, "\n".join(body) + "\n", marker and marker.group(1).split(":")[0],
                           marker and marker.group(2), start + 1))
    return found


def shell_commands(text: str) -> list[str]:
    """The logical lines of a shell block: continuation backslashes joined, blank lines and comments dropped."""
    joined = text.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


@dataclass(frozen=True)
class PlmCommand:
    """A ``plm`` command written in a page: its arguments (without ``plm``) and the text it reads on stdin."""

    args: list[str]
    stdin: str | None


def plm_command(line: str) -> PlmCommand | None:
    """``line`` as a plm command (also ``torchrun ... -m plm.cli.main ARGS``), or None for another command."""
    if not PLM_LINE.match(line):
        return None
    words = shlex.split(line, comments=True)
    while "=" in words[0] and not words[0].startswith("-"):  # OMP_NUM_THREADS=1 plm ...
        words = words[1:]
    if words[0] == "torchrun":
        if "plm.cli.main" not in words:
            return None
        words = words[words.index("plm.cli.main"):]
    args, stdin = words[1:], None
    for index, word in enumerate(args):
        if word in SHELL_OPERATORS:
            if word == "<<<":
                stdin = args[index + 1] + "\n"
            args = args[:index]
            break
    return PlmCommand(args, stdin)


def command_path(parser: argparse.ArgumentParser, args: list[str]) -> tuple[tuple[str, ...], argparse.ArgumentParser]:
    """The subcommand ``args`` names (``("eval", "bleu")``) and its parser."""
    path: tuple[str, ...] = ()
    for word in args:
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subcommands or word not in subcommands[0].choices:
            break
        parser = subcommands[0].choices[word]
        path = (*path, word)
    return path, parser


def every_parser(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from every_parser(subparser, (*path, name))


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def documented_plm_commands(path: Path) -> list[tuple[int, str, PlmCommand]]:
    found = []
    for block in blocks(path):
        if block.language in SHELLS:
            for line in shell_commands(block.text):
                command = plm_command(line)
                if command is not None:
                    found.append((block.line, line, command))
    return found


# The site --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with --strict for the tests of this module that read it."""
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    problems = [line for line in result.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert result.returncode == 0, "\n".join(problems) or result.stderr[-3000:]
    return site


def test_the_site_builds_in_strict_mode_with_its_api_reference(site: Path) -> None:
    reference = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="plm.from_preset"' in reference and 'id="plm.pretrain"' in reference  # ::: plm was rendered
    literal = [f"{page.relative_to(site)}: {role}" for page in sorted((site / "api").rglob("*.html"))
               for role in REST_ROLE.findall(page.read_text(encoding="utf-8"))]
    assert not literal, literal  # a reST role renders as written; a cross-reference is a link
    training = (site / "api" / "training" / "index.html").read_text(encoding="utf-8")
    assert 'href="../models/#plm.models.recipe.PretrainingRecipe"' in training  # a docstring's link to another page
    assert (site / "repository" / "examples" / "compare" / "pre-ln-vs-post-ln.png").is_file()  # docs/hooks.py


REST_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`[^`]*`")


# The API reference: each page starts with its packages' public API (their ``__all__``), then their internals ------


SOURCE = ROOT / "src"
# Every package but the command line's, whose interface is the command (docs/cli.md).
PACKAGES = sorted(".".join(init.parent.relative_to(SOURCE).parts) for init in (SOURCE / "plm").rglob("__init__.py")
                  if init.parent.name != "cli")
MODULES = sorted(".".join(path.relative_to(SOURCE).with_suffix("").parts).removesuffix(".__init__")
                 for path in (SOURCE / "plm").rglob("*.py") if "cli" not in path.relative_to(SOURCE).parts)
HEADING_ID = re.compile(r'<h\d id="(plm[\w.]*)"')


def exports(package: str) -> list[str]:
    return importlib.import_module(package).__all__


def canonical_path(value: object) -> str | None:
    """Where a function or class is defined (``plm.training.trainer.Trainer``); None for a constant."""
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    return f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else None


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_a_package_exports_imports_and_is_no_module_s_name(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]  # hasattr imports a lazy name
    assert not missing, f"{package}.__all__ names what it does not have: {missing}"
    # `import plm.training.pretrain` makes the module plm.training's attribute `pretrain`, over an exported function
    shadowed = [name for name in module.__all__ if importlib.util.find_spec(f"{package}.{name}") is not None]
    assert not shadowed, f"{package}.__all__ names its own modules: {shadowed}"


def test_each_of_plm_s_names_is_exported_by_its_package_too() -> None:
    """So that the package's page shows it in its public API; a name that is also its module's cannot be."""
    missing = []
    for name in plm.__all__:
        home = ".".join(plm._EXPORTS[name].split(".")[:2])  # the table of where plm's lazy names live
        if home in PACKAGES and importlib.util.find_spec(f"{home}.{name}") is None:
            value = getattr(plm, name)
            if not any(getattr(importlib.import_module(home), other) is value for other in exports(home)):
                missing.append(f"plm.{name} (from {home})")
    assert not missing, missing


def imported_from_plm(text: str) -> list[tuple[str, object]]:
    """What a Python example takes from plm: ``from plm.x import y``, and ``plm.x.y`` after ``import plm``."""
    taken = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "plm":
            module = importlib.import_module(node.module)
            taken += [(f"{node.module}.{alias.name}", getattr(module, alias.name)) for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain, inner = [inner.attr, *chain], inner.value
            if isinstance(inner, ast.Name) and inner.id == "plm":
                value: object = plm
                for part in chain:
                    value = getattr(value, part)
                    if not isinstance(value, type(plm)):
                        taken.append(("plm." + ".".join(chain[: chain.index(part) + 1]), value))
                        break
    return taken


def test_every_name_the_pages_python_examples_take_from_plm_is_exported() -> None:
    exported = [getattr(importlib.import_module(package), name) for package in PACKAGES for name in exports(package)]
    taken = [(f"{page_id(path)}:{block.line}: {name}", value) for path in DOCUMENTS for block in blocks(path)
             if block.language == "python" for name, value in imported_from_plm(block.text)]
    assert len(taken) > 20
    private = [where for where, value in taken if not any(value is public for public in exported)]
    assert not private, f"examples that use what no package's __all__ exports: {private}"


def api_sections(site: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Each API page's heading ids: those of its public API, and those of its internals."""
    sections = {}
    for page in sorted((DOCS / "api").glob("*.md")):
        html = (site / "api" / ("" if page.stem == "index" else page.stem) / "index.html").read_text(encoding="utf-8")
        public, internals = html.find('id="public-api"'), html.find('id="internals"')
        assert 0 < public < internals, f"docs/api/{page.name}: no 'Public API' heading, then an 'Internals' one"
        sections[page.stem] = HEADING_ID.findall(html[public:internals]), HEADING_ID.findall(html[internals:])
    return sections


def test_each_api_page_shows_exactly_its_packages_public_api(site: Path) -> None:
    shown: dict[str, str] = {}
    for page, (public, _) in api_sections(site).items():
        packages = [heading for heading in public if heading in PACKAGES]
        assert packages, f"docs/api/{page}.md: its public API shows no package"
        for package in packages:
            assert package not in shown, f"{package}: the public API of docs/api/{shown[package]}.md and {page}.md"
            shown[package] = page
            rendered = {heading for heading in public if heading.startswith(f"{package}.")
                        and "." not in heading[len(package) + 1:] and heading not in PACKAGES}
            expected = {f"{package}.{name}" for name in exports(package)}
            assert not rendered - expected, f"docs/api/{page}.md: internals in {package}'s public API: " \
                                            f"{sorted(rendered - expected)}"
            assert not expected - rendered, f"docs/api/{page}.md: {package}'s public API lacks " \
                                            f"{sorted(expected - rendered)}"
    assert sorted(shown) == PACKAGES, f"packages without a public API on any page: {set(PACKAGES) - set(shown)}"


def test_every_module_is_documented_and_a_public_name_only_in_its_public_api(site: Path) -> None:
    sections = api_sections(site)
    every = {heading for public, internals in sections.values() for heading in (*public, *internals)}
    missing = [module for module in MODULES if module not in every]
    assert not missing, f"modules on no page of docs/api: {missing}"
    # plm's own names are shown on the index and again in their packages' public APIs, not in their modules
    public = {(package, name) for package in PACKAGES if package != "plm" for name in exports(package)}
    twice = [f"{package}.{name} at {path}" for package, name in sorted(public)
             if (path := canonical_path(getattr(importlib.import_module(package), name)))
             and any(path in internals for _, internals in sections.values())]
    twice += [f"plm.{name} at {path}" for name in plm.__all__
              if (path := canonical_path(getattr(plm, name))) and path in sections["index"][1]]
    assert not twice, f"public names documented again in their modules: {twice}"


def test_docstrings_link_with_mkdocstrings_cross_references_not_rest_roles() -> None:
    """mkdocstrings renders ``:class:`X``` as written; ``[`X`][plm.module.X]`` becomes a link (the site's strict build
    fails on a link to nothing)."""
    roles = [f"{path.relative_to(ROOT)}: {role}" for path in sorted((ROOT / "src" / "plm").rglob("*.py"))
             for role in REST_ROLE.findall(path.read_text(encoding="utf-8"))]
    assert not roles, roles


def slug(heading: str) -> str:
    """A heading's anchor, as MkDocs and GitHub both make it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_links_lead_to_pages_and_headings_that_exist() -> None:
    """The README is not part of the site, so the strict build does not check its links; this does."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((?!https?:)([^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert len(links) > 20
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file(), f"README.md links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
            assert anchor in {slug(heading) for heading in headings}, f"README.md: no heading #{anchor} in {target}"


def test_the_readme_s_python_example_is_run_as_written() -> None:
    python = [block for block in blocks(ROOT / "README.md") if block.language == "python"]
    assert python and all(block.marker == "runnable" for block in python), "README.md: a Python block not run"


@pytest.mark.parametrize("name", WORKFLOWS)
def test_each_workflow_page_starts_with_a_runnable_example(name: str) -> None:
    first = next(block for block in blocks(DOCS / f"{name}.md") if block.marker != "file")
    assert first.marker == "runnable", f"docs/{name}.md: its first example (line {first.line}) is not marked runnable"


@pytest.mark.parametrize("path", DOCUMENTS, ids=page_id)
def test_every_marker_stands_before_a_block_and_every_runnable_block_is_plm_or_python(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines[:-1], 1):
        if MARKER.match(line.strip()):
            assert FENCE.match(lines[number]), f"{page_id(path)}:{number}: a marker with no block after it"
    for block in blocks(path):
        if block.marker == "runnable":
            assert block.language in (*SHELLS, "python"), f"{page_id(path)}:{block.line}: runnable {block.language}"
            if block.language in SHELLS:
                others = [line for line in shell_commands(block.text) if plm_command(line) is None]
                assert not others, f"{page_id(path)}:{block.line}: a runnable shell block runs plm only: {others}"


# Every plm line ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCUMENTS, ids=page_id)
def test_every_plm_line_parses_with_the_real_parser(path: Path) -> None:
    parser, wrong = build_parser(), []
    for line_number, line, command in documented_plm_commands(path):
        error = io.StringIO()
        try:
            with contextlib.redirect_stderr(error), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(command.args)
        except SystemExit as stop:
            if stop.code != 0:  # --help exits with 0
                where = f"{page_id(path)}, the block at line {line_number}"
                wrong.append(f"{where}: {line}\n    {error.getvalue().strip()}")
    assert not wrong, "documented commands plm does not take:\n" + "\n".join(wrong)


@pytest.mark.parametrize("path", DOCUMENTS, ids=page_id)
def test_every_documented_default_is_the_parser_s(path: Path) -> None:
    """A page that says "`--fpr` (default 1e-4)" names the default of the commands it shows that take ``--fpr``."""
    root = build_parser()
    parsers = dict(every_parser(root))
    shown = {command_path(root, command.args)[0] for _, _, command in documented_plm_commands(path)}
    wrong = []
    for flag, value in DOCUMENTED_DEFAULT.findall(path.read_text(encoding="utf-8")):
        takers = {p: a for p, parser in parsers.items() for a in parser._actions if flag in a.option_strings}
        assert takers, f"{page_id(path)}: {flag} is no flag of any plm command"
        for name, action in {p: a for p, a in takers.items() if p in shown}.items() or takers.items():
            if not same_value(value, action):
                wrong.append(f"{flag} of plm {' '.join(name)}: documented {value}, the parser's {action.default!r}")
    assert not wrong, f"{page_id(path)}: " + "; ".join(wrong)


def same_value(documented: str, action: argparse.Action) -> bool:
    """Whether the documented default is the action's; a default told in words ("the model's context") is that
    of a flag left None, to be worked out at run time."""
    try:
        value = action.type(documented) if callable(action.type) else documented
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        return action.default is None
    if isinstance(value, float) or isinstance(action.default, float):
        return action.default is not None and math.isclose(float(value), float(action.default))
    return value == action.default


# Runnable examples ---------------------------------------------------------------------------------------------------


RUNNABLE_PAGES = [path for path in DOCUMENTS if any(block.marker == "runnable" for block in blocks(path))]


@pytest.mark.parametrize("path", RUNNABLE_PAGES, ids=page_id)
def test_the_runnable_examples_of_each_page_run(path: Path, tmp_path: Path, text_file: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "my.txt").write_text(text_file.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.chdir(work)
    for block in blocks(path):
        where = f"{page_id(path)}:{block.line}"
        if block.marker == "file":
            (work / block.file_name).write_text(block.text, encoding="utf-8")
        elif block.marker == "runnable" and block.language == "python":
            exec(compile(block.text, where, "exec"), {"__name__": "__main__"})
        elif block.marker == "runnable":
            for line in shell_commands(block.text):
                command = plm_command(line)
                monkeypatch.setattr(sys, "stdin", io.StringIO(command.stdin or ""))
                try:
                    code = main(command.args)
                except SystemExit as stop:  # --help
                    code = stop.code
                assert code == 0, f"{where}: `{line}` exited with {code}"
