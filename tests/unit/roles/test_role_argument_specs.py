"""Every role default has an argument spec with a type and a description, and vice versa (STYLE 8)."""

from __future__ import annotations

from pathlib import Path

import os

import pytest
import yaml

ROLES_DIR = Path(os.environ.get("HAL_ROLES_DIR", Path(__file__).resolve().parents[3] / "roles"))
ROLES = sorted(p for p in ROLES_DIR.iterdir() if (p / "defaults/main.yml").is_file())


def _load(role: Path):
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
    options = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    return defaults, options


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_and_argument_specs_agree(role):
    defaults, options = _load(role)
    # Options marked required: false without a default are Vault inputs (munge_key, ...).
    vault_inputs = {k for k, v in options.items() if v.get("required") is False and k not in defaults}
    assert set(defaults) == set(options) - vault_inputs


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_option_has_type_and_description(role):
    _, options = _load(role)
    assert [k for k, v in options.items() if not v.get("type") or not v.get("description")] == []


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_public_variables_carry_the_role_prefix(role):
    defaults, _ = _load(role)
    assert [k for k in defaults if not k.startswith(f"{role.name}_")] == []
