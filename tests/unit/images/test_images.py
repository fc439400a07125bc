"""Node images: what goes into one and its version (images/recipe.py), the store a build fills
(images/build.py: what a build leaves in a root, list and prune), and `hal-provision image`'s
errors. A real build (debootstrap, apt, mksquashfs) runs in the baremetal scenario
(tests/infra/test_baremetal.py), where its image boots."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hal_provision.cli.main import app
from hal_provision.images import build, recipe
from hal_provision.loader import validate
from hal_provision.model.slurm_versions import OPERATING_SYSTEMS

BAREMETAL = Path(__file__).resolve().parents[2] / "data" / "clusters" / "baremetal.yml"


def model():
    return validate(BAREMETAL).model


def test_the_releases_are_the_models_operating_systems():
    assert recipe.RELEASES == {o.name: o.release for o in OPERATING_SYSTEMS}


def test_the_recipe_has_the_base_the_roles_packages_and_the_images_own():
    prov = model().provisioning
    data = recipe.of_model(prov, "compute")
    assert set(recipe.BASE_PACKAGES) <= set(data["packages"])
    # The roles the image names: slurmd from slurm, munge, sssd from ldap_client, ansible from fleet_node.
    assert {"slurmd", "munge", "sssd-ldap", "ansible", "minisign"} <= set(data["packages"])
    assert "slapd" not in data["packages"]  # ldap_server preseeds it itself
    assert data["packages"] == sorted(set(data["packages"]))
    assert data["release"] == "bookworm" and data["kernel_args"] == ["console=ttyS0,115200"]


def test_the_version_changes_with_every_input_and_only_then():
    prov = model().provisioning
    base = recipe.version(recipe.of_model(prov, "compute"))
    assert base == recipe.version(recipe.of_model(model().provisioning, "compute"))  # deterministic
    image = prov.images["compute"]
    for change in (
        {"packages": ["tree"]},
        {"roles": [*image.roles, "lmod"]},
        {"kernel_args": []},
        {"os": "debian13"},
    ):
        changed = prov.model_copy(update={"images": {"compute": image.model_copy(update=change)}})
        assert recipe.version(recipe.of_model(changed, "compute")) != base, change
    keyed = prov.model_copy(update={"ssh_authorized_keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA x"]})
    assert recipe.version(recipe.of_model(keyed, "compute")) != base


def test_unknown_roles_are_named():
    assert recipe.unknown_roles(["slurm", "slurmm", "munge"]) == ["slurmm"]


def test_configure_removes_what_a_node_makes_of_its_own(tmp_path):
    root = tmp_path / "root"
    for rel in (
        *build.NODE_OWN,
        "etc/ssh/ssh_host_ed25519_key",
        "etc/ssh/ssh_host_rsa_key.pub",
        "var/lib/dbus/machine-id",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("a node's own\n")
    (root / "etc/machine-id").write_text("0123456789abcdef\n")
    data = recipe.recipe("debian12", [], [], [], authorized_keys=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA controller"])
    build._configure(root, "compute", "abc123", data)
    assert not any((root / rel).exists() for rel in build.NODE_OWN)
    assert list((root / "etc/ssh").glob("ssh_host_*")) == []
    assert (root / "etc/machine-id").read_text() == "" and not (root / "var/lib/dbus/machine-id").exists()
    keys = root / "root/.ssh/authorized_keys"
    assert keys.read_text() == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA controller\n"
    assert keys.stat().st_mode & 0o777 == 0o600 and (root / "root/.ssh").stat().st_mode & 0o777 == 0o700
    assert json.loads((root / recipe.IMAGE_RECORD.lstrip("/")).read_text()) == {
        "name": "compute",
        "release": "bookworm",
        "version": "abc123",
    }
    assert "ssh-keygen -A" in (root / "usr/local/sbin/hal-image-boot").read_text()
    assert os.access(root / "usr/local/sbin/hal-image-boot", os.X_OK)


def _version(store: Path, name: str, version: str, built_at: int) -> Path:
    path = store / name / version
    path.mkdir(parents=True)
    for f in build.FILES:
        (path / f).write_bytes(b"x" * 10)
    (path / build.MANIFEST).write_text(
        json.dumps(
            {"name": name, "version": version, "built_at": built_at, "files": {f: {"size": 10} for f in build.FILES}}
        )
    )
    return path


def test_the_store_lists_complete_versions_newest_first_and_prunes_all_but_the_models(tmp_path):
    store = tmp_path / "store"
    for i, v in enumerate(["v1", "v2", "v3", "v4"]):
        _version(store, "compute", v, 100 + i)
    (store / "compute" / ".build-v5-x").mkdir()  # a build under way: never listed nor pruned
    half = store / "compute" / "v0"
    half.mkdir()
    (half / "vmlinuz").write_text("no manifest")
    assert [b.version for b in build.list_store(store)] == ["v4", "v3", "v2", "v1"]
    removed = build.prune(store, {"compute": "v1"}, keep=1)
    assert sorted(b.version for b in removed) == ["v2", "v3"]
    assert sorted(p.name for p in (store / "compute").iterdir()) == [".build-v5-x", "v0", "v1", "v4"]


def test_a_build_refuses_without_root_or_on_another_architecture(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(build.ImageError, match="needs root"):
        build.build("compute", recipe.recipe("debian12", [], [], []), tmp_path)
    assert not any(tmp_path.iterdir())  # nothing written


def test_image_list_says_what_is_built_and_what_the_model_boots(tmp_path):
    prov = model().provisioning
    version = recipe.version(recipe.of_model(prov, "compute"))
    _version(tmp_path, "compute", "old0000", 1)
    runner = CliRunner()
    result = runner.invoke(app, ["image", "list", str(BAREMETAL), "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "compute@old0000" in result.output and f"compute@{version}  not built" in result.output
    result = runner.invoke(app, ["image", "prune", str(BAREMETAL), "--store", str(tmp_path), "--keep", "0"])
    assert result.exit_code == 0 and "removed compute@old0000" in result.output


def test_image_commands_refuse_a_model_without_provisioning_or_an_unknown_image(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["image", "list"])  # the embedded HAL description boots nothing
    assert result.exit_code == 2 and "no `provisioning` section" in result.output
    result = runner.invoke(app, ["image", "build", str(BAREMETAL), "--image", "gpu", "--store", str(tmp_path)])
    assert result.exit_code == 2 and "no image gpu under provisioning.images (known: compute)" in result.output
    assert not any(tmp_path.iterdir())
