"""The node bundle of pull mode: deterministic (two builds byte-identical), versioned
by the model and the code, its manifest listing every member with its sha256, no secret in it,
the static inventory read by real Ansible as the rendered inventory is, the command's exit codes,
and a golden of the manifest of x86-twogen (code hashes normalised, rendered ones kept)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from hal_provision.inventory.documents import parse_documents, tree_documents
from hal_provision.inventory.groups import list_inventory
from hal_provision.inventory.source import inventory_files
from hal_provision.loader import validate
from hal_provision.pull import bundle as lib
from hal_provision.render import render_all
from hal_provision.render.backup import SECRET_FILES, SECRETS_DIR
from hal_provision.render.portal import CA_SIGNED_KEY, COOKIE_SECRET
from hal_provision.render.writer import write_tree

REPO = Path(__file__).resolve().parents[3]
TWOGEN = REPO / "tests" / "data" / "clusters" / "x86-twogen.yml"
GOLDEN = REPO / "tests" / "golden" / "bundle" / "x86-twogen.manifest.json"
UPDATE = os.environ.get("HAL_UPDATE_GOLDEN") == "1"
BIN = Path(sys.executable).parent
CODE = "<code>"


def model_of(path: Path = TWOGEN):
    loaded = validate(path)
    assert loaded.model is not None
    return loaded.model


def built(model):
    return lib.build(model, render_all(model))


@pytest.fixture(scope="module")
def twogen_bundle(twogen):
    return built(twogen)


def members(tarball: bytes) -> dict[str, tarfile.TarInfo | bytes]:
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else m) for m in tar.getmembers()}


def test_two_builds_are_byte_identical(twogen, twogen_bundle):
    again = built(model_of())
    assert again.outputs() == twogen_bundle.outputs()


def test_archive_is_normalised(twogen_bundle):
    raw = twogen_bundle.tarball
    assert raw[4:8] == b"\0\0\0\0", "gzip header has a time"
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        infos = tar.getmembers()
    names = [m.name for m in infos]
    assert names == sorted(names) and names[0] == "bundle"
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in infos} == {(0, 0, 0, "", "")}


def test_version_changes_with_the_model(twogen, twogen_bundle):
    other = twogen.model_copy(update={"deploy": twogen.deploy.model_copy(update={"drain_wait_s": 60})})
    changed = built(other)
    assert changed.version != twogen_bundle.version
    assert changed.manifest["code_hash"] == twogen_bundle.manifest["code_hash"]
    assert changed.manifest["model_hash"] != twogen_bundle.manifest["model_hash"]
    m = changed.manifest
    expected = hashlib.sha256((m["model_hash"] + m["code_hash"] + m["files_hash"]).encode()).hexdigest()
    assert changed.version == expected[:16]


def test_version_changes_with_the_rendered_files_alone(twogen, twogen_bundle):
    """A tree rendered with more than the model (the sandbox's harness settings) is another bundle."""
    from hal_provision.render import render_all

    files = render_all(twogen)
    files["files/etc/hal-provision/health/h100.json"] += " "
    other = lib.build(twogen, files)
    assert other.manifest["model_hash"] == twogen_bundle.manifest["model_hash"]
    assert other.manifest["code_hash"] == twogen_bundle.manifest["code_hash"]
    assert other.version != twogen_bundle.version


def test_version_changes_with_the_code(twogen, twogen_bundle):
    code = lib.code_members()
    code["bundle/roles/common/tasks/main.yml"] += b"\n# changed\n"
    assert lib.code_hash(code) != twogen_bundle.manifest["code_hash"]


def test_manifest_lists_every_member_with_its_sha256(twogen_bundle):
    found = members(twogen_bundle.tarball)
    files = {name: data for name, data in found.items() if isinstance(data, bytes)}
    inside = json.loads(files.pop(lib.MANIFEST))
    assert inside == twogen_bundle.manifest == json.loads(twogen_bundle.outputs()[f"{twogen_bundle.version}.json"])
    assert inside["files"] == {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    for prefix in (
        "bundle/ansible.cfg",
        "bundle/playbooks/site.yml",
        "bundle/roles/slurm/tasks/main.yml",
        "bundle/collections/ansible_collections/hal/provision/plugins/inventory/cluster.py",
        "bundle/files/etc/hal-provision/deploy.json",
        "bundle/files/etc/slurm/slurm.conf",
        "bundle/hal_provision/hostlist.py",
        "bundle/hal_provision/node/converge.py",
        "bundle/hal_provision/node/health/healthcheck.py",
        lib.INVENTORY,
    ):
        assert prefix in files, prefix
    assert inside["nodes"] == [f"tg0{i}" for i in range(1, 9)]
    assert inside["points"] == {"tg-mgmt": inside["nodes"]}


def test_current_json_names_the_bundle_and_its_sha256(twogen_bundle):
    outputs = twogen_bundle.outputs()
    current = json.loads(outputs["current.json"])
    assert current == {
        "version": twogen_bundle.version,
        "bundle": f"{twogen_bundle.version}.tar.gz",
        "sha256": hashlib.sha256(outputs[current["bundle"]]).hexdigest(),
        "size": len(outputs[current["bundle"]]),
    }


def test_no_secret_is_in_the_bundle(twogen_bundle):
    secrets = {*(p for paths in SECRET_FILES.values() for p in paths), CA_SIGNED_KEY, COOKIE_SECRET}
    names = list(members(twogen_bundle.tarball))
    for name in names:
        if name.startswith(lib.RENDERED):
            path = "/" + name[len(lib.RENDERED) :]
            assert path not in secrets and not path.startswith(SECRETS_DIR + "/"), name
        assert not name.endswith((".key", "_pass")) or "/templates/" in name or "/defaults/" in name, name


def test_static_inventory_lists_as_the_rendered_inventory(twogen, twogen_bundle, tmp_path):
    """Real ansible-inventory: the library's listing is what it lists for the rendered
    inventory, and the bundle's hosts.json (no plugin of ours) lists the same."""
    write_tree(render_all(twogen), tmp_path / "rendered")
    static = tmp_path / "bundle" / "inventory" / "hosts.json"
    static.parent.mkdir(parents=True)
    static.write_bytes(members(twogen_bundle.tarball)[lib.INVENTORY])

    def listed(source: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        proc = subprocess.run(
            [str(BIN / "ansible-inventory"), "-i", str(source), "--list"],
            capture_output=True,
            text=True,
            env={**env, "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "1"},
            check=True,
        )
        data = json.loads(proc.stdout)
        data["_meta"].pop("profile", None)
        for hostvars in data["_meta"]["hostvars"].values():
            assert hostvars.pop("ansible_local") == {}  # Ansible's own, in every listing
        return data

    by_rendered = listed(tmp_path / "rendered" / "inventory")
    assert tree_documents(render_all(twogen)) == parse_documents(inventory_files(twogen))
    assert list_inventory(parse_documents(inventory_files(twogen))) == by_rendered
    assert listed(static) == by_rendered
    assert by_rendered["deploy_pull"]["hosts"] == [f"tg0{i}" for i in range(1, 9)]
    assert by_rendered["deploy_points"]["hosts"] == ["tg-mgmt"]


def normalised(manifest: dict) -> dict:
    out = dict(manifest, version=CODE, code_hash=CODE)
    out["files"] = {
        path: digest if path.startswith(lib.RENDERED) or path == lib.INVENTORY else CODE
        for path, digest in manifest["files"].items()
    }
    return out


def test_manifest_matches_its_golden(twogen_bundle):
    """Regenerate with HAL_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/pull/test_bundle.py."""
    actual = json.dumps(normalised(twogen_bundle.manifest), indent=1, sort_keys=True) + "\n"
    if UPDATE:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(actual)
    assert GOLDEN.read_text() == actual


def run_cli(*args: str, keys: Path | None = None) -> subprocess.CompletedProcess:
    """`hal-provision bundle ARGS`, its release key in KEYS (never the user's own)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HAL_RELEASE_KEYS": str(keys or Path("/nonexistent/keys"))}
    return subprocess.run(
        [sys.executable, "-m", "hal_provision.cli", "bundle", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )


def test_command_writes_the_bundle_manifest_and_current(tmp_path, twogen_bundle):
    from hal_provision import release

    proc = run_cli(str(TWOGEN), "--out", str(tmp_path / "out"), keys=tmp_path / "keys")
    assert proc.returncode == 0, proc.stderr
    written = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    built = twogen_bundle.outputs()
    assert {k: v for k, v in written.items() if k != "current.json"} == {
        k: v for k, v in built.items() if k != "current.json"
    }
    # current.json: the same release, signed with the key `bundle` made
    signed = release.verify(written["current.json"], tmp_path / "keys" / "twogen.pub")
    assert {k: signed[k] for k in ("version", "bundle", "sha256", "size")} == json.loads(built["current.json"])


def test_push_cluster_is_refused_naming_deploy_mode_and_nothing_is_written(tmp_path):
    proc = run_cli("--out", str(tmp_path / "out"))  # HAL: push
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "deploy.mode" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
