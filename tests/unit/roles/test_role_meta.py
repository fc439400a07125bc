"""Every role carries meta/main.yml as Ansible and ansible-galaxy read it: its name (the
directory's), what it does, the Debian releases it is written for, and no dependencies (site.yml's
tiers order the roles, not meta dependencies)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = sorted(p for p in (Path(__file__).resolve().parents[3] / "roles").iterdir() if p.is_dir())


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_every_role_has_its_meta(role):
    meta = yaml.safe_load((role / "meta" / "main.yml").read_text())
    info = meta["galaxy_info"]
    assert info["role_name"] == role.name and info["description"] and info["license"] == "Apache-2.0"
    debian = [p for p in info["platforms"] if p["name"] == "Debian"]
    assert debian and set(debian[0]["versions"]) <= {"bookworm", "trixie"}, info["platforms"]
    assert meta["dependencies"] == []
