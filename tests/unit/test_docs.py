"""The documentation site: it builds under mkdocs --strict (a broken link or anchor fails), its
reference pages are what scripts/gen_reference.py writes from the code, and the README stays a
short front page that still gives the two set-up commands."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.sweep.spec import spec_fields
from tests.helpers import parses

ROOT = Path(__file__).resolve().parents[2]
RUN_COMMAND = "pip install 'torch==2.13.0' && pip install -e . && collbench run"
TEST_COMMAND = "pip install 'torch==2.13.0' && pip install -e '.[test]' && python -m pytest -q"


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert (site / "index.html").is_file()


def test_the_reference_pages_are_generated_from_the_code():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    cli = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert [c for c in commands if f"## collbench {c}\n" not in cli] == []
    config = (ROOT / "docs" / "reference" / "config.md").read_text()
    assert [f.name for f in spec_fields() if f"`{f.name}`" not in config] == []  # its key, or its old key


def test_the_readme_fits_a_few_screens():
    readme = ROOT / "README.md"
    assert readme.stat().st_size <= 8000
    lines = readme.read_text().splitlines()
    assert RUN_COMMAND in lines
    assert TEST_COMMAND in lines


def _commands() -> list[tuple[str, str]]:
    """(page, command) for every collbench command README.md and the docs give: each line of a shell
    block that starts with `collbench COMMAND`, and each inline `collbench ...` span of the pages a
    reader follows (not the dated measurement notes of PERFORMANCE.md and GPU.md, whose spans quote
    parts of commands); an optional `[--flag VALUE]` is read both left out and given."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = []
    for page in pages:
        if page.name == "cli.md":  # generated from the parser itself
            continue
        text = page.read_text()
        spans = [block for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S)
                 if lang in ("", "bash", "sh", "shell", "console")]
        if page.name not in ("PERFORMANCE.md", "GPU.md"):
            spans += [" ".join(m.split()) for m in re.findall(r"(?<!`)`(collbench [^`]+)`(?!`)", text)]
        for span in spans:
            for line in re.sub(r"\\\n\s*", " ", span).splitlines():
                for part in re.split(r"&&|;|\|", line.strip().removeprefix("$ ")):
                    part = re.split(r"\s#|\s[12]?>", part)[0].strip()
                    if re.match(r"collbench [a-z]", part):  # not a line of output ("collbench: ...")
                        found.append((str(page.relative_to(ROOT)), part))
    return found


def test_every_command_the_docs_give_parses():
    """Issue 45: every command of README and docs is one collbench takes (a renamed option, or a
    positional argument made required, fails here)."""
    commands = _commands()
    assert len(commands) > 80  # README's table, the guides' examples, the deploy pages
    names = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    bad = [f"{page}: {command}: no such command" for page, command in commands if command.split()[1] not in names]
    commands = [(page, c) for page, c in commands if len(c.split()) > 2]  # the rest name a command in prose
    for page, command in commands:
        optional = re.findall(r"\[([^\]]+)\]", command)
        for given in ({re.sub(r"\s*\[[^\]]+\]", "", command)} | ({command.replace("[", "").replace("]", "")}
                                                               if optional else set())):
            said = parses(given.replace("COMMAND", "run"))
            if said:
                bad.append(f"{page}: {given}: {said}")
    assert bad == []


def test_every_api_call_the_docs_give_binds():
    """The Python API's calls in README and docs/guides/api.md: each names a function of
    orchestrator.api and passes arguments it takes (a sweep option by its SweepSpec key). The calls
    that run on one node run in tests/integration/test_first_hour.py."""
    import ast
    import inspect

    from orchestrator import api

    keys = {f.name for f in spec_fields()}
    snippets = [block for page in (ROOT / "README.md", ROOT / "docs" / "guides" / "api.md")
                for block in re.findall(r"```(?:py|python)?\n(.*?)```", page.read_text(), flags=re.S)
                if "api." in block]
    calls = [node for block in snippets for node in ast.walk(ast.parse(block))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "api"]
    assert len(calls) >= 13  # run, report, compare, qualify, replay, import, plan, doctor, watch, predict, preflight
    bad = []
    for call in calls:
        fn = getattr(api, call.func.attr, None)
        if fn is None:
            bad.append(f"api.{call.func.attr}: no such function")
            continue
        sig = inspect.signature(fn)
        try:
            sig.bind(*[None] * len(call.args), **{k.arg: None for k in call.keywords})
        except TypeError as e:
            bad.append(f"api.{call.func.attr}({ast.unparse(call)[len(call.func.attr) + 5:]}: {e}")
            continue
        spread = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        named = set(sig.parameters)
        if spread and call.func.attr != "predict":  # the rest of the keywords are sweep options
            bad += [f"api.{call.func.attr}: {k.arg} is not a sweep option" for k in call.keywords
                    if k.arg not in named and k.arg not in keys]
    assert bad == []


# the Python blocks of the docs that tests run as written, by page and block number (from 0)
RUN_BY = {("README.md", 0): "tests/integration/test_first_hour.py",
          ("docs/guides/results.md", 0): "tests/unit/test_readme_snippets.py",
          ("docs/guides/results.md", 1): "tests/unit/test_readme_snippets.py",
          ("docs/guides/results.md", 2): "tests/unit/test_readme_snippets.py"}


def test_every_python_block_of_the_docs_runs_in_a_test_or_says_what_it_needs():
    """Issue 59: a snippet that fails as written costs a new user their trust. Each Python block of
    README and docs/ is run as written by a test that reads its page (RUN_BY), or the line before it
    says what it needs that a test machine lacks (`<!-- needs: ... -->`); none is both."""
    bad, seen = [], set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        name = str(page.relative_to(ROOT))
        text = page.read_text()
        for i, block in enumerate(re.finditer(r"^```(?:py|python)\n", text, flags=re.M)):
            before = text[:block.start()].rstrip("\n").rsplit("\n", 1)[-1]
            needs = re.fullmatch(r"<!-- needs: .+ -->", before)
            seen.add((name, i))
            runner = RUN_BY.get((name, i))
            if runner and (needs or name.rsplit("/", 1)[-1] not in (ROOT / runner).read_text()):
                bad.append(f"{name} block {i}: {runner} " + ("runs it, yet it says what it needs" if needs
                                                           else "does not read the page"))
            elif not runner and not needs:
                bad.append(f"{name} block {i}: run by no test, and says nothing of what it needs")
    assert bad == [] and set(RUN_BY) <= seen, (bad, set(RUN_BY) - seen)
