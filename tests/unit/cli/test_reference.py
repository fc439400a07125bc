"""docs/cluster-yml.md is what the model makes of it now."""

from __future__ import annotations

from pathlib import Path

from hal_provision.model import Cluster
from hal_provision.cli.reference import REGENERATE, check_words, reference_markdown

DOC = Path(__file__).resolve().parents[3] / "docs" / "cluster-yml.md"


def test_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == reference_markdown(), (
        f"docs/cluster-yml.md is stale: regenerate it with `{REGENERATE}` and commit it"
    )


def test_every_section_and_check_is_in_it():
    text = reference_markdown()
    for key in Cluster.model_fields:
        assert f"| `{key}` |" in text
    assert "## NodeGroup" in text and "## VirtualPartition" in text
    assert len(check_words()) >= 80  # every @check of hal_provision/checks is read


def test_checks_found_for_a_key():
    text = reference_markdown()
    [line] = [row for row in text.splitlines() if row.startswith("| `memory_reserve_mib` |")]
    assert "`real_memory_positive`" in line
    [line] = [row for row in text.splitlines() if row.startswith("| `count` | integer or null |")]
    assert "`host_count_matches`" in line
