"""`plan --rendered WORKDIR/rendered` on a sandbox: both sides rendered as `sandbox up` renders
them there (its derived model, its harness changes), and the commands of the advice the
sandbox's own: `sandbox up ... --no-converge` to render, `sandbox bundle` to bundle, its
inventory for the rest. The sandbox's work directory is made here as `sandbox up` makes it,
without containers (its keys, tree, derived model, sandbox.json and the deployed record
site.yml leaves); tests/infra/test_pull.py runs such advice on the fleet scenario.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hal_provision import tools
from hal_provision.model import Cluster
from hal_provision.sandbox import lifecycle

REPO = Path(__file__).resolve().parents[3]
FLEET = REPO / "tests" / "data" / "clusters" / "fleet.yml"
SUBNET = "10.89.79.0/24"


def make_sandbox(workdir: Path, file: Path) -> lifecycle.Sandbox:
    """A sandbox's work directory as `sandbox up FILE --computes 2 --subnet SUBNET` and a
    whole-cluster site.yml leave it, without its containers."""
    full = Cluster.model_validate(yaml.safe_load(file.read_text()))
    sb = lifecycle.plan(full, workdir, computes=2, subnet=SUBNET)
    lifecycle.make_root_key(sb, log=lambda _m: None)
    lifecycle.make_user_keys(sb, log=lambda _m: None)
    lifecycle.render(sb)
    lifecycle.record_source(sb, file, 2, SUBNET)
    record = workdir / "rendered.deployed"  # as record.yml copies it: files/ and inventory/, not sandbox.yml
    for part in ("files", "inventory"):
        shutil.copytree(workdir / "rendered" / part, record / part)
    (record / "inventory" / "sandbox.yml").unlink()
    return sb


def hal(*argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [tools.self_command(), *argv],
        cwd=cwd,
        env=tools.child_env(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture()
def site(tmp_path):
    """(work directory relative to tmp_path, a changed copy of fleet.yml) with the sandbox made."""
    make_sandbox(tmp_path / "sb", FLEET)
    data = yaml.safe_load(FLEET.read_text())
    data["slurm"]["partitions"][0]["max_time"] = "2-00:00:00"
    new = tmp_path / "new.yml"
    new.write_text(yaml.safe_dump(data, sort_keys=False))
    return Path("sb"), new


def test_the_plan_on_a_sandbox_is_the_sandbox_s_own(tmp_path, site):
    workdir, new = site
    proc = hal("plan", "new.yml", "--rendered", f"{workdir}/rendered", "--json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    # Only what the change touches: the harness changes and the sandbox's keys are on both sides.
    assert [(f["path"], f["change"]) for c in doc["components"] for f in c["files"]] == [
        ("files/etc/slurm/slurm.conf", "modified")
    ], doc["components"]
    commands = [c for line in doc["advice_commands"] for c in line]
    assert commands == [
        f"hal-provision sandbox up new.yml --workdir {workdir} --computes 2 --subnet {SUBNET} --no-converge",
        f"hal-provision sandbox bundle --workdir {workdir} --out {workdir}/bundles",
        f"ansible-playbook -i {workdir}/rendered/inventory playbooks/site.yml --limit 'all:!deploy_pull'",
        f'ansible-playbook -i {workdir}/rendered/inventory playbooks/publish.yml -e "bundle_dir=$PWD/{workdir}/bundles"',
        f"hal-provision fleet status {workdir}/rendered/inventory",
        # The sandbox's two compute nodes, not the description's four.
        f"hal-provision fleet converge 'fl[01-02]' -i {workdir}/rendered/inventory --wait",
    ], doc["advice"]


def test_once_the_sandbox_holds_new_no_render_and_its_bundle_is_the_sandbox_s(tmp_path, site):
    workdir, new = site
    full = Cluster.model_validate(yaml.safe_load(new.read_text()))
    lifecycle.render(lifecycle.made_again(tmp_path / workdir, full))  # what `sandbox up new.yml --no-converge` renders
    proc = hal("plan", "new.yml", "--rendered", f"{workdir}/rendered", "--json", cwd=tmp_path)
    doc = json.loads(proc.stdout)
    assert not any("sandbox up" in c for line in doc["advice_commands"] for c in line), doc["advice"]
    assert doc["advice_commands"][0] == [f"hal-provision sandbox bundle --workdir {workdir} --out {workdir}/bundles"]

    keys = tmp_path / "keys"
    proc = hal(
        "sandbox",
        "bundle",
        "--workdir",
        str(workdir),
        "--out",
        f"{workdir}/bundles",
        cwd=tmp_path,
        env={"HAL_RELEASE_KEYS": str(keys)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bundles = tmp_path / workdir / "bundles"
    manifest = json.loads(next(p for p in bundles.glob("*.json") if p.name != "current.json").read_text())
    assert sorted(manifest["nodes"]) == ["fl01", "fl02"], manifest["nodes"]
    # The sandbox's tree: its harness lines and connection settings travel to the nodes.
    import tarfile

    with tarfile.open(next(bundles.glob("*.tar.gz"))) as tar:
        names = tar.getnames()
        slurm = tar.extractfile(next(n for n in names if n.endswith("files/etc/slurm/slurm.conf"))).read().decode()
        hosts = json.loads(tar.extractfile(next(n for n in names if n.endswith("inventory/hosts.json"))).read())
    assert "MaxTime=2-00:00:00" in slurm and "SlurmdParameters=config_overrides" in slurm
    assert "hal_sandbox_workdir" in json.dumps(hosts), "the sandbox's inventory settings are not in the bundle"


def test_sandbox_bundle_without_a_sandbox_says_so(tmp_path):
    proc = hal("sandbox", "bundle", "--workdir", "nowhere", "--out", "b", cwd=tmp_path)
    assert proc.returncode == 2 and "no sandbox at nowhere" in proc.stderr, proc.stderr
    assert not (tmp_path / "b").exists()
