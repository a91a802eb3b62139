"""The docs site and the README: the site builds with warnings as errors, every example runs.

Each page of ``docs/`` and ``README.md`` is one test: its fenced blocks run in order, in a fresh
temporary folder, sharing one namespace (a later block may use a name an earlier one defined,
as a reader running the page top to bottom would):

- ```` ```python ```` blocks are executed;
- ```` ```bash ```` blocks are commands; each must be a ``topdown ...`` command, run in this
  process through ``topdown.product.cli.main`` and expected to exit 0;
- a block right after ``<!-- docs: file NAME -->`` is not run but written to ``NAME`` (a config
  file or a data file that later commands read);
- a block right after ``<!-- docs: extra NAME -->`` needs that extra (``dask``, ``parquet``): when
  it is not installed, the rest of the page is skipped with a reason naming the extra;
- a block right after the visible line ``*Not run by the docs tests: REASON.*`` is shown only
  (kept rare: installs, cluster commands, benchmarks of millions of records);
- any other block (``text``, ``toml``, output without a language) is shown only; a ``python`` or
  ``bash`` block that is neither run nor marked is an error, so no example goes unchecked.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from topdown.support.optional import EXTRAS, is_installed

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md")) + [README]
PACKAGES = ("topdown", "constraints", "solvers", "mechanisms", "synth")

#: The README is the front door; the rest lives in docs/ (issue 28, item 3).
README_MAX_CHARS = 12_000

FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!-- docs: (?P<kind>file|extra) (?P<arg>\S+) -->")
NOT_RUN = re.compile(r"^\*Not run by the docs tests: (?P<reason>.+)\.\*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with what the line before it says to do with it."""

    line: int
    info: str
    body: str
    marker: str  # "", "file", "extra" or "not run"
    arg: str  # the file name, the extra, or the reason


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in order, each with the marker on the line before it."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker, arg = "", ""
        if m := MARKER.fullmatch(before):
            marker, arg = m["kind"], m["arg"]
        elif m := NOT_RUN.fullmatch(before):
            marker, arg = "not run", m["reason"]
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(line, match["info"].strip(), match["body"], marker, arg))
    return found


def commands(body: str) -> list[str]:
    """The commands of a ``bash`` block: continuation lines joined, comments dropped."""
    joined = body.replace("\\\n", " ")
    return [c for c in (ln.split(" #")[0].strip() for ln in joined.splitlines()) if c]


def run_command(command: str, where: str) -> None:
    from topdown.product.cli import main

    argv = shlex.split(command)
    assert argv[0] == "topdown", f"{where}: a bash example must be a topdown command: {command!r}"
    code = main(argv[1:])
    assert code == 0, f"{where}: {command!r} exited {code}"


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for block in blocks(page):
        where = f"{page_id(page)}:{block.line}"
        if block.marker == "not run":
            continue
        if block.marker == "file":
            target = tmp_path / block.arg
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body, encoding="utf-8")
            continue
        if block.marker == "extra":
            assert block.arg in EXTRAS, f"{where}: unknown extra {block.arg!r}"
            absent = [m for m in EXTRAS[block.arg] if not is_installed(m)]
            if absent:
                pytest.skip(f"{where} needs the {block.arg!r} extra: pip install '.[{block.arg}]'")
        if block.info == "python":
            code = compile(block.body, where, "exec")
            exec(code, namespace)
        elif block.info == "bash":
            for command in commands(block.body):
                run_command(command, where)


def test_every_shown_example_is_run_or_marked() -> None:
    """A python or bash block is run, written as a file, or says why not (visibly)."""
    for page in PAGES:
        for block in blocks(page):
            where = f"{page_id(page)}:{block.line}"
            if block.info == "python" and block.marker != "not run":
                ast.parse(block.body)  # a syntax error fails here with its line
            if block.info == "bash" and block.marker not in ("not run", "file"):
                for command in commands(block.body):
                    assert command.startswith("topdown "), (
                        f"{where}: {command!r} is not a topdown command: make it one, or put "
                        "'*Not run by the docs tests: REASON.*' on the line before the block"
                    )
            assert block.info in ("python", "bash", "toml", "text", "json", "csv", ""), (
                f"{where}: fence language {block.info!r} is neither run nor a known shown-only one"
            )


def test_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text) <= README_MAX_CHARS, f"README.md has {len(text)} characters"
    for target in re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).is_file(), f"README.md links to {target}, which does not exist"


def public_modules() -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if parts[-1] == "__main__" or any(p.startswith("_") for p in parts):
                continue
            found.add(".".join(parts))
    return found


def test_api_reference_covers_every_public_module() -> None:
    listed = set()
    for page in (DOCS / "api").glob("*.md"):
        listed |= set(re.findall(r"^::: (\S+)$", page.read_text(encoding="utf-8"), re.M))
    assert public_modules() - listed == set(), "public modules missing from docs/api/"
    assert listed - public_modules() == set(), "docs/api/ lists modules that do not exist"


def test_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # the theme's banner is not a warning
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "api" / "topdown" / "index.html").is_file()
    print(f"mkdocs build --strict: {seconds:.1f} s")
