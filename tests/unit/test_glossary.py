"""One word per meaning (issue 43): every value collbench writes from one of its vocabularies (a
row's status, a run's state, a verdict, a flag, an alert, ...) is defined in docs/GLOSSARY.md, and
the README links it, so a value added to an enum without a definition fails here."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.analysis.compare import Verdict
from orchestrator.analysis.diagnosis import FlagKind
from orchestrator.doctor.checks import CheckStatus
from orchestrator.execution.canary import AlertKind
from orchestrator.results.schema import RunState
from orchestrator.sweep.qualify_types import Outcome, Phase
from workloads.messages import Stage, Status, Topology

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = (ROOT / "docs" / "GLOSSARY.md").read_text()
VOCABULARIES = (Status, RunState, CheckStatus, Stage, Phase, Outcome, FlagKind, Verdict, AlertKind, Topology)


def test_every_value_of_every_vocabulary_is_defined_under_its_enum():
    missing = []
    for enum in VOCABULARIES:
        # the definition: the paragraph that names the enum [`Name`] lists each of its values in `code`
        paragraph = next((p for p in GLOSSARY.split("\n- ") if f"[`{enum.__name__}`" in p), "")
        missing += [f"{enum.__name__}.{v.name}" for v in enum if f"`{v.value}`" not in paragraph]
    assert missing == []


def test_the_readme_links_the_glossary():
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"\]\(docs/GLOSSARY\.md\)", readme)
