"""The documentation site: it builds under mkdocs --strict (a broken link or anchor fails), its
reference pages are what scripts/gen_reference.py writes from the code, and the README stays a
short front page that still gives the two set-up commands."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.sweep.spec import spec_fields

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
