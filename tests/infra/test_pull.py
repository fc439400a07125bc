"""Pull mode on the running cluster: the compute nodes converge themselves from the
bundle their distribution point serves, and `hal-provision fleet status` tells which version
each one runs and which drifted.

Runs on a sandbox whose model has `deploy.mode: pull` (the `fleet` molecule scenario: tests/data/
clusters/fleet.yml), after site.yml pushed it once (the nodes' enrolment). Each step builds the
bundle of the sandbox's model, changed or not, as `hal-provision bundle` builds it (from the
tree `sandbox up` renders, so the nodes' inventory has the sandbox's settings), pushes the
control plane (the Slurm tiers on the hosts that do not pull), publishes it with
playbooks/publish.yml and lets the nodes take it:

1. the bundle of the model as pushed (so nothing for the control plane either): every node's
   converge changes nothing;
2. a change of the partition's MaxTime in a copy of the description, applied as `hal-provision
   plan` on the sandbox's tree advises, each command as printed (the sandbox's render and
   bundle, the control plane's push, the publish, the nodes' converge now, `fleet status`):
   the controller has it, every node takes it (its slurm.conf), drains itself around it and
   resumes, and `fleet status` shows each at the new version;
   Then forged releases put straight on the point (as whoever is root there could): the bundle
   of another change with a current.json that has its valid sha256 but no signature, then one
   signed with another key, then the genuine release of step 1 again (an older serial): every
   node refuses each before downloading anything, nothing on them changes, `fleet status` shows
   them `refused` with the reason; the signed release of step 2 published again is taken;
3. a node that is down when the next version is published (a change of the nodes' deploy.json
   alone: nothing for the control plane) shows as drift, and takes the version by itself once it
   is up again (its timer fires at boot);
4. a node whose converge fails (its munge key gone: pull mode never fetches secrets) is
   drained with the reason and shows as drift; with the key back it converges and resumes.

Marked `pull` (and `changes`: it changes the cluster); the `fleet` scenario runs only these.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from deployed import deployed, retry, run_playbook, sandbox_render
from hal_provision import tools

D = deployed()
HV = D.hostvars[D.login] if D.hosts_in("role_login") else {}
WORKDIR = Path(HV["hal_sandbox_workdir"]) if HV.get("hal_sandbox_workdir") else None
DEPLOY = json.loads(D.rendered("etc/hal-provision/deploy.json") or "{}")
NODES = sorted(DEPLOY.get("nodes", {}))
CONTROL_PLANE_TIERS = ("slurm-controller.yml", "slurm-login.yml")
CONVERGE_TIMEOUT = 900  # one node's converge (check, drain, converge, resume), generously
POINT = DEPLOY["points"][0]["host"] if DEPLOY.get("points") else None
REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.pull,
    pytest.mark.changes,
    pytest.mark.skipif(
        DEPLOY.get("mode") != "pull",
        reason="the model's compute nodes are pushed (deploy.mode push): pull mode is the fleet scenario's",
    ),
    pytest.mark.skipif(WORKDIR is None, reason="only the sandbox's model can be changed"),
]


def load_model() -> dict:
    return json.loads((WORKDIR / "model.json").read_text())


def with_max_time(model: dict, max_time: str) -> dict:
    out = json.loads(json.dumps(model))
    out["slurm"]["partitions"][0]["max_time"] = max_time
    return out


def with_drain_wait(model: dict, seconds: int) -> dict:
    """A change of the nodes' deploy.json alone: the control plane has nothing to push for it."""
    out = json.loads(json.dumps(model))
    out["deploy"]["drain_wait_s"] = seconds
    return out


def node_drain_wait(host: str) -> int:
    return json.loads(D.host(host).check_output("cat /etc/hal-provision/deploy.json"))["drain_wait_s"]


def publish(model: dict, tmp: Path, control_plane: bool = True) -> str:
    """The bundle of `model` built into TMP/<version>/ and its release signed with the cluster's
    key (as `hal-provision bundle` does, with the key the enrolling push made), the control plane
    pushed (unless the change is the nodes' alone), the bundle published; its version."""
    from hal_provision.pull import bundle as lib
    from hal_provision import release
    from hal_provision.cli.bundle import write_outputs
    from hal_provision.render.writer import write_tree

    cluster, files = sandbox_render(WORKDIR, model)
    built = lib.build(cluster, files)
    step = tmp / built.version
    write_tree(files, step / "tree")
    write_outputs(release.sign_outputs(built.outputs(), cluster.cluster.name), step / "bundle")
    for playbook in CONTROL_PLANE_TIERS if control_plane else ():  # the nodes' slurm.conf comes with their bundle
        run_playbook(
            D.inventory,
            playbook,
            "-e",
            f"hal_rendered_dir={step / 'tree' / 'files'}",
            "--limit",
            "all:!deploy_pull",
            inventories=[D.inventory],
        )
    run_playbook(D.inventory, "publish.yml", "-e", f"bundle_dir={step / 'bundle'}")
    return built.version


def fleet(*argv: str, timeout: int = CONVERGE_TIMEOUT) -> tuple[int, dict | str]:
    """`hal-provision fleet ARGV` on the sandbox's inventory: (exit status, JSON or output)."""
    proc = subprocess.run(
        [tools.self_command(), "fleet", *argv],
        env=tools.child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        return proc.returncode, proc.stdout + proc.stderr


def status() -> tuple[int, dict]:
    code, doc = fleet("status", str(D.inventory), "--json", timeout=120)
    assert isinstance(doc, dict), doc
    return code, doc


def converge(hosts: list[str]) -> None:
    code, out = fleet("converge", ",".join(hosts), "-i", str(D.inventory), "--wait")
    assert code in (0, 1), out


def last(host: str) -> dict:
    """The node's last.json; {} before its first run, or while it cannot be reached (booting)."""
    try:
        out = D.host(host).run(f"cat {DEPLOY['version_file']}")
    except RuntimeError:  # testinfra: no SSH connection
        return {}
    return json.loads(out.stdout) if out.rc == 0 else {}


def slurm_state(host: str) -> tuple[str, str]:
    out = D.host(D.controller).check_output(f"sinfo -h -N -n {host} -o '%T|%E'")
    state, _, reason = out.splitlines()[0].partition("|")
    return state.strip().rstrip("*~#!%$@^-+"), reason.strip()


def container(host: str, action: str) -> None:
    name = D.container(host)
    assert name, f"{host} is no sandbox container"
    proc = subprocess.run(["podman", action, name], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def tmp():
    with tempfile.TemporaryDirectory(prefix="hal-pull-") as d:
        yield Path(d)
    for host in NODES:  # should a test stop half way: every node up and its key in place
        if D.container(host):
            subprocess.run(["podman", "start", D.container(host)], capture_output=True, check=False)
        retry(
            lambda h=host: (
                last(h) is not None
                and D.host(h).run("test ! -e /root/munge.key.saved || mv /root/munge.key.saved /etc/munge/munge.key").rc
                == 0
            ),
            120,
            3,
        )


def test_the_point_answers_only_the_nodes_it_serves():
    """Its nginx listens on its cluster address and lets in the pull nodes it serves; anyone else
    (this machine, the controller; the point itself) gets 403."""
    import urllib.error
    import urllib.request

    url = DEPLOY["points"][0]["url"] + "current.json"
    for host in NODES:
        code = D.host(host).check_output(f"curl -s -o /dev/null -w '%{{http_code}}' {url}")
        assert code in ("200", "404"), f"{host}: GET {url}: HTTP {code}"  # 404: nothing published yet
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 403, refused.value
    code = D.host(POINT).check_output(f"curl -s -o /dev/null -w '%{{http_code}}' {url}")
    assert code == "403", f"{POINT}: GET {url}: HTTP {code}"


def test_the_bundle_of_the_pushed_model_changes_nothing(tmp):
    # The model as site.yml pushed it: the control plane runs it already, nothing to push there.
    version = publish(load_model(), tmp, control_plane=False)
    converge(NODES)
    for host in NODES:
        run = last(host)
        assert (run.get("version"), run.get("state"), run.get("changed"), run.get("drained")) == (
            version,
            "current",
            0,
            False,
        ), run  # the check run found nothing to change: no drain either
    code, doc = status()
    assert code == 0 and doc["drift"] == 0, json.dumps(doc, indent=1)
    assert {n: d["version"] for n, d in doc["nodes"].items()} == {n: version for n in NODES}


def test_a_model_change_applied_as_the_plan_advises_reaches_every_node(tmp):
    """The admin's way: a changed description, `hal-provision plan` on the sandbox's tree, and
    every command of its advice run as printed, in order, from the checkout (the follow command
    last: it exits 0 once every node runs the new version). The control plane takes the change
    from the push, every node from its bundle, drained around it and resumed."""
    from hal_provision import release

    source = json.loads((WORKDIR / "sandbox.json").read_text())
    description = yaml.safe_load(Path(source["file"]).read_text())
    description["slurm"]["partitions"][0]["max_time"] = "2-00:00:00"
    new = tmp / "new.yml"
    new.write_text(yaml.safe_dump(description, sort_keys=False))
    rendered = os.path.relpath(WORKDIR / "rendered", REPO)
    proc = shell(f"hal-provision plan {new} --rendered {rendered} --json")
    assert proc.returncode == 2, proc.stdout + proc.stderr  # changes, none blocking
    plan = json.loads(proc.stdout)
    steps = [(line, command) for line, commands in zip(plan["advice"], plan["advice_commands"]) for command in commands]
    print("\n".join(command for _line, command in steps))
    assert [line.split(":")[0] for line, _c in steps] == [
        "render first",
        "bundle (NEW's, its release signed with the cluster's key; nothing changes yet)",
        "push the control plane (the change reaches fl-mgmt there)",
        "publish (on every point, current.json last)",
        "follow",
        "or hurry (their converge now, not at the timer)",
    ], plan["advice"]
    follow = None
    for line, command in steps:
        if line.startswith("follow:"):  # exits 1 until every node runs the new version: run last
            follow = command
            continue
        proc = shell(command)
        assert proc.returncode == 0, f"{command}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    proc = shell(follow)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    bundles = WORKDIR / "bundles"
    version = release.open_envelope((bundles / "current.json").read_bytes())["version"]
    shutil.copytree(bundles, tmp / version / "bundle")  # for the forged releases' test
    partition = D.host(D.controller).check_output("scontrol show partition")
    assert "MaxTime=2-00:00:00" in partition, partition  # the control plane's push
    for host in NODES:
        run = last(host)
        assert (run.get("version"), run.get("state"), run.get("drained_for_change"), run.get("drained")) == (
            version,
            "changed",
            True,
            False,
        ), run  # drained itself around the change, resumed after
        assert run["changed"] > 0, run
        assert "MaxTime=2-00:00:00" in D.host(host).check_output("cat /etc/slurm/slurm.conf")
        assert retry(lambda h=host: slurm_state(h)[0] in ("idle", "mixed", "allocated"), 60, 2), slurm_state(host)
    code, doc = status()
    assert code == 0 and doc["drift"] == 0, json.dumps(doc, indent=1)
    assert {n: d["version"] for n, d in doc["nodes"].items()} == {n: version for n in NODES}


def shell(command: str) -> subprocess.CompletedProcess:
    """COMMAND as an admin's shell runs it in the checkout (the venv's commands on PATH)."""
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        env=tools.child_env(),
        capture_output=True,
        text=True,
        timeout=CONVERGE_TIMEOUT,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def put_on_point(tmp: Path, files: dict[str, bytes]) -> None:
    """Files written straight into the point's bundle root, current.json last, as whoever is
    root on the point could (publish.yml would refuse an unsigned release)."""
    for name in sorted(files, key=lambda n: n == "current.json"):
        local = tmp / "forged" / name
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(files[name])
        proc = subprocess.run(
            ["podman", "cp", str(local), f"{D.container(POINT)}:{DEPLOY['bundle_root']}/{name}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr


def refused_everywhere(reason: str, running: str, before: dict[str, str]) -> None:
    """Every node refused the point's release for `reason`, still runs `running`, its slurm.conf
    as `before`, undrained, and `fleet status` shows them refused."""
    converge(NODES)
    for host in NODES:
        run = last(host)
        assert (run.get("state"), run.get("version"), run.get("drained")) == ("refused", running, False), run
        assert reason in run["failed_task"], run
        assert D.host(host).check_output("cat /etc/slurm/slurm.conf") == before[host], f"{host}: slurm.conf changed"
        assert slurm_state(host)[0] in ("idle", "mixed", "allocated"), slurm_state(host)
    code, doc = status()
    assert code == 1 and all(doc["nodes"][h]["drift"] == "refused" for h in NODES), json.dumps(doc, indent=1)


def test_forged_and_older_releases_are_refused_by_every_node(tmp):
    from hal_provision.pull import bundle as lib
    from hal_provision import release

    running = {last(h).get("version") for h in NODES}
    assert len(running) == 1, running  # step 2's version, everywhere
    running = running.pop()
    before = {h: D.host(h).check_output("cat /etc/slurm/slurm.conf") for h in NODES}
    cluster, files = sandbox_render(WORKDIR, with_max_time(load_model(), "4-00:00:00"))
    built = lib.build(cluster, files)
    outputs = built.outputs()
    assert built.version != running

    # The bundle of a change, with a current.json naming its valid sha256, unsigned.
    put_on_point(tmp, outputs)
    refused_everywhere("not a signed release", running, before)
    # The same, signed with a key that is not the cluster's.
    other = tmp / "intruder-keys"
    put_on_point(
        tmp, {"current.json": release.sign_outputs(outputs, cluster.cluster.name, directory=other)["current.json"]}
    )
    refused_everywhere("the signature does not verify", running, before)
    code, doc = status()
    assert doc["points"][0]["signature"].startswith("DOES NOT VERIFY"), doc["points"]
    # Step 1's genuine release again: signed, but older than the one the nodes run.
    first = min(
        (d for d in tmp.iterdir() if (d / "bundle" / "current.json").is_file()),
        key=lambda d: release.open_envelope((d / "bundle" / "current.json").read_bytes())["serial"],
    )
    assert first.name != running
    run_playbook(D.inventory, "publish.yml", "-e", f"bundle_dir={first / 'bundle'}")
    refused_everywhere("a rollback, refused", running, before)
    # The signed release the nodes run, published again: taken (nothing to change), no drift.
    run_playbook(D.inventory, "publish.yml", "-e", f"bundle_dir={tmp / running / 'bundle'}")
    converge(NODES)
    assert all((last(h).get("state"), last(h).get("version")) == ("current", running) for h in NODES), {
        h: last(h) for h in NODES
    }
    code, doc = status()
    assert code == 0 and doc["drift"] == 0 and doc["points"][0]["signature"].startswith("verified"), json.dumps(
        doc, indent=1
    )


def test_a_node_that_was_down_catches_up_by_itself(tmp):
    down, up = NODES[-1], NODES[:-1]
    container(down, "stop")
    try:
        version = publish(with_drain_wait(load_model(), 121), tmp, control_plane=False)
        converge(up)
        code, doc = status()
        assert code == 1 and doc["nodes"][down]["drift"] == "unreachable", json.dumps(doc, indent=1)
        assert all(doc["nodes"][h]["version"] == version and not doc["nodes"][h]["drift"] for h in up), doc
    finally:
        container(down, "start")
    booted = time.monotonic()
    run = retry(
        lambda: (r := last(down)) and r.get("version") == version and r.get("state") in ("changed", "current") and r,
        CONVERGE_TIMEOUT,
        5,
    )
    assert run, f"{down} did not take {version} within {CONVERGE_TIMEOUT} s of its start: {last(down)}"
    print(f"{down} took {version} {time.monotonic() - booted:.0f} s after it was started again")
    assert node_drain_wait(down) == 121
    code, doc = status()
    assert code == 0 and doc["drift"] == 0, json.dumps(doc, indent=1)


def test_a_failed_converge_drains_the_node_with_the_reason(tmp):
    node = NODES[0]
    D.host(node).check_output("mv /etc/munge/munge.key /root/munge.key.saved")
    try:
        version = publish(with_drain_wait(load_model(), 122), tmp, control_plane=False)
        converge([node])
        run = last(node)
        assert (run.get("version"), run.get("state"), run.get("drained")) == (version, "failed", True), (
            run
        )  # left drained
        assert "munge" in (run.get("failed_task") or "").lower(), run
        state, reason = slurm_state(node)
        assert state in ("drained", "draining") and reason.startswith(
            f"hal-provision converge failed: version {version}"
        ), (state, reason)
        code, doc = status()
        assert code == 1 and doc["nodes"][node]["drift"] == "failed", json.dumps(doc, indent=1)
    finally:
        D.host(node).check_output("mv /root/munge.key.saved /etc/munge/munge.key")
    converge(NODES)  # the others take the version too
    run = last(node)
    assert (run.get("version"), run.get("state"), run.get("failed_task")) == (version, "changed", None), run
    assert node_drain_wait(node) == 122
    assert retry(lambda: slurm_state(node)[0] in ("idle", "mixed", "allocated"), 60, 2), slurm_state(node)
    code, doc = status()
    assert code == 0 and doc["drift"] == 0, json.dumps(doc, indent=1)
