"""`hal-provision reimage`'s refusals before it touches a node (no provisioning, a node that
does not boot from the network, a boot server that does not serve the model's version yet),
read over real HTTP; and hostkeys.py, which records a rebooted node's new SSH host key where
its inventory makes ssh look."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hal_provision import hostkeys
from hal_provision.cli.main import app
from hal_provision.images import recipe
from hal_provision.loader import validate

BAREMETAL = Path(__file__).resolve().parents[2] / "data" / "clusters" / "baremetal.yml"
SERVER = "127.0.0.10"  # the boot server's address in the copy below: a loopback address of its own


@pytest.fixture
def cluster(tmp_path) -> Path:
    """baremetal.yml with its boot network on the loopback, so a test can be its boot server."""
    text = BAREMETAL.read_text().replace("10.89.81.", "127.0.0.")
    path = tmp_path / "cluster.yml"
    path.write_text(text)
    return path


def serve(root: Path, port: int):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer((SERVER, port), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def reimage(*argv: str):
    return CliRunner().invoke(app, ["reimage", *argv])


def test_a_model_without_provisioning_is_refused():
    result = reimage("hal01")
    assert result.exit_code == 2 and "no `provisioning` section" in result.output


def test_a_node_that_does_not_boot_from_the_network_is_refused(cluster):
    result = reimage("bm-mgmt,bm01", "-f", str(cluster))
    assert result.exit_code == 2
    assert "bm-mgmt: not network-booted nodes (a node group with `image` and a boot MAC)" in result.output


def test_nothing_happens_until_the_boot_server_serves_the_models_version(cluster, tmp_path):
    model = validate(cluster).model
    version = recipe.version(recipe.of_model(model.provisioning, "compute"))
    result = reimage("bm01", "-f", str(cluster), "-i", str(tmp_path))  # nothing answers there yet
    assert result.exit_code == 2
    assert "bm01: the boot server serves nothing readable at http://127.0.0.10:8182/ipxe/52-54-00-89-81-21.ipxe" in (
        result.output
    )
    assert f"the model compute@{version}" in result.output and "playbooks/boot-server.yml first" in result.output
    root = tmp_path / "www"
    (root / "ipxe").mkdir(parents=True)
    (root / "ipxe" / "52-54-00-89-81-21.ipxe").write_text("#!ipxe\nkernel http://x/vmlinuz hal.image=compute@0ld0\n")
    httpd = serve(root, 8182)
    try:
        result = reimage("bm01", "-f", str(cluster), "-i", str(tmp_path))
    finally:
        httpd.shutdown()
    assert result.exit_code == 2 and f"serves compute@0ld0 at http://{SERVER}:8182/ipxe/" in result.output


def test_the_known_hosts_file_is_the_one_the_inventory_names(tmp_path):
    hv = {"ansible_ssh_common_args": f"-o UserKnownHostsFile={tmp_path}/kh -o StrictHostKeyChecking=yes"}
    assert hostkeys.known_hosts_of(hv) == tmp_path / "kh"
    assert hostkeys.known_hosts_of({}) == Path.home() / ".ssh" / "known_hosts"


def test_a_new_host_key_replaces_the_nodes_old_ones_and_keeps_the_others(tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("bm01,10.0.0.21 ssh-ed25519 OLD\nbm02,10.0.0.22 ssh-ed25519 KEEP\n10.0.0.21 ssh-rsa OLDER\n")
    kh.chmod(0o644)
    hostkeys.record(kh, ["bm01", "10.0.0.21"], "ssh-ed25519 NEW")
    assert kh.read_text() == "bm02,10.0.0.22 ssh-ed25519 KEEP\nbm01,10.0.0.21 ssh-ed25519 NEW\n"
    assert kh.stat().st_mode & 0o777 == 0o644
    fresh = tmp_path / "new" / "known_hosts"
    hostkeys.record(fresh, ["bm03"], "ssh-ed25519 K")
    assert fresh.read_text() == "bm03 ssh-ed25519 K\n" and fresh.stat().st_mode & 0o777 == 0o600
