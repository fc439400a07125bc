"""Bare metal on the running cluster: compute nodes that are QEMU guests with empty disks,
powered through a Redfish BMC (sushy-tools' emulator, libvirt-backed), booted from the network
the management node serves (dnsmasq, iPXE, nginx: roles/boot_server) into the model's image,
enrolled by the controller and converged by pull mode.

Runs on a sandbox made with `hal-provision sandbox up FILE --bare-metal N` (the `baremetal`
molecule scenario: tests/data/clusters/baremetal.yml), which did all of that before these tests:

1. `hal-provision power status` reports every guest on, through its BMC;
2. each guest runs the image version the model names (its image record, the kernel line iPXE
   gave it, its root a squashfs held in memory), and its disk is still empty;
3. each is idle in Slurm, its converge record names that image, and a second converge changes
   nothing;
4. a directory user's job runs on every guest;
5. (changes) reimage: the model's image gets one more package; the image is built and the boot
   server serves the new version; with a job of the directory user running on one guest,
   `hal-provision reimage` on it waits for the job (the node is drained for its reboot, the job
   runs on), reboots it through Slurm into the new version, and it comes back idle with the new
   version in its converge record; the job completed.

Marked `baremetal` (and the last one `changes`); the `baremetal` scenario runs only these.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from deployed import deployed, retry, run_playbook, sandbox_render
from hal_provision import tools

D = deployed()
HV = D.hostvars[D.login] if D.hosts_in("role_login") else {}
WORKDIR = Path(HV["hal_sandbox_workdir"]) if HV.get("hal_sandbox_workdir") else None
IMAGES = json.loads(D.rendered("etc/hal-provision/provisioning/images.json") or "{}")
DEPLOY = json.loads(D.rendered("etc/hal-provision/deploy.json") or "{}")
GUESTS = sorted(DEPLOY.get("nodes", {}))  # the pull nodes: every compute node, each a guest
USER = "alice"  # tests/data/clusters/baremetal.yml's directory user
TIMEOUT = 1800  # a reimage: the job, the reboot, the boot, the enrolment and a converge

pytestmark = [
    pytest.mark.baremetal,
    pytest.mark.skipif(not IMAGES, reason="the model boots no node from the network (no provisioning section)"),
    pytest.mark.skipif(
        WORKDIR is None or not (WORKDIR / "baremetal-timings.json").is_file(),
        reason="only a sandbox made with --bare-metal has guests to boot (the baremetal scenario)",
    ),
]


def cli(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [tools.self_command(), *argv], env=tools.child_env(), capture_output=True, text=True, timeout=timeout
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def model_file(tmp: Path, model: dict) -> Path:
    path = tmp / "cluster.json"
    path.write_text(json.dumps(model))
    return path


def image_of(host: str) -> dict:
    return json.loads(D.host(host).check_output("cat /etc/hal-provision/image.json"))


def version_of(image: str = "compute") -> str:
    return IMAGES["images"][image]["version"]


def slurm_state(host: str) -> str:
    out = D.host(D.controller).check_output(f"sinfo -h -N -n {host} -o '%T'")
    return out.splitlines()[0].strip()


def last(host: str) -> dict:
    return json.loads(D.host(host).check_output(f"cat {DEPLOY['version_file']}"))


@pytest.fixture(scope="module")
def tmp():
    with tempfile.TemporaryDirectory(prefix="hal-baremetal-") as d:
        yield Path(d)


def test_every_guest_is_on_through_its_bmc():
    proc = cli("power", "status", ",".join(GUESTS), "-f", str(WORKDIR / "model.json"), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert {h: r["result"] for h, r in doc["hosts"].items()} == {h: "on" for h in GUESTS}


@pytest.mark.parametrize("host", GUESTS)
def test_the_guest_runs_the_models_image_from_the_network_and_its_disk_is_empty(host):
    record = image_of(host)
    assert (record["name"], record["version"]) == ("compute", version_of())
    cmdline = D.host(host).check_output("cat /proc/cmdline")
    assert "boot=live" in cmdline and f"/images/compute/{version_of()}/root.squashfs" in cmdline, cmdline
    assert f"hal.image=compute@{version_of()}" in cmdline and f"hostname={host}" in cmdline, cmdline
    # The root is live-boot's overlay over the squashfs it fetched into memory; nothing is installed on disk.
    assert D.host(host).check_output("findmnt -n -o FSTYPE /") == "overlay"
    assert "squashfs" in D.host(host).check_output("findmnt -n -o FSTYPE -t squashfs || true")
    assert D.host(host).run("blkid /dev/vda").rc != 0  # no file system, no partition table on the disk
    assert D.host(host).check_output("hostname") == host


@pytest.mark.parametrize("host", GUESTS)
def test_the_guest_is_idle_in_slurm_and_its_converge_record_names_the_image(host):
    assert slurm_state(host) == "idle"
    record = last(host)
    assert record["state"] in ("current", "changed") and record["image"] == f"compute@{version_of()}", record


def test_a_second_converge_of_the_guests_changes_nothing():
    proc = cli("fleet", "converge", ",".join(GUESTS), "-i", str(D.inventory), "--wait", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for host in GUESTS:
        record = last(host)
        assert (record["state"], record["changed"]) == ("current", 0), record


def test_a_directory_users_job_runs_on_every_guest():
    out = D.host(D.login).check_output(
        f"runuser -u {USER} -- srun --chdir=/tmp -N{len(GUESTS)} -w {','.join(GUESTS)} -t 5 hostname"
    )
    assert sorted(out.split()) == GUESTS


@pytest.mark.changes
def test_reimage_waits_for_the_running_job_and_boots_the_new_version(tmp):
    host = GUESTS[0]
    model = json.loads((WORKDIR / "model.json").read_text())
    model["provisioning"]["images"]["compute"]["packages"] = [
        *model["provisioning"]["images"]["compute"].get("packages", []),
        "tree",
    ]
    cluster, files = sandbox_render(WORKDIR, model)
    from hal_provision.images import recipe
    from hal_provision.render.writer import write_tree

    new = recipe.version(recipe.of_model(cluster.provisioning, "compute"))
    assert new != version_of()
    tree = tmp / "tree"
    write_tree(files, tree)
    cluster_file = model_file(tmp, model)
    started = time.monotonic()
    built = cli("image", "build", str(cluster_file), "--store", str(WORKDIR / "images"), timeout=1200)
    assert built.returncode == 0, built.stdout + built.stderr
    build_s = time.monotonic() - started
    run_playbook(
        D.inventory,
        "boot-server.yml",
        "-e",
        f"hal_rendered_dir={tree / 'files'}",
        inventories=[D.inventory],
    )
    # The directory user's job on the node, running when the reimage starts.
    job = D.host(D.login).check_output(
        f"runuser -u {USER} -- sbatch --parsable --chdir=/tmp -w {host} -t 10 --wrap 'sleep 90; echo done'"
    )
    retry(lambda: D.host(D.login).check_output(f"squeue -h -j {job} -o %T") == "RUNNING", 60, 1)
    boot_before = D.host(host).check_output("cat /proc/sys/kernel/random/boot_id")
    reimage = subprocess.Popen(
        [
            tools.self_command(),
            "reimage",
            host,
            "-f",
            str(cluster_file),
            "-i",
            str(D.inventory),
            "--timeout",
            str(TIMEOUT),
            "--log",
            str(tmp / "reimage.log"),
        ],
        env=tools.child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Slurm holds the reboot for the job: the node is marked for reboot and drains, the job runs on.
        assert retry(lambda: "REBOOT" in D.host(D.controller).check_output(f"scontrol show node {host}"), 120, 2)
        time.sleep(10)
        assert D.host(D.login).check_output(f"squeue -h -j {job} -o %T") == "RUNNING"
        assert D.host(host).check_output("cat /proc/sys/kernel/random/boot_id") == boot_before
        output, _ = reimage.communicate(timeout=TIMEOUT)
    finally:
        if reimage.poll() is None:
            reimage.kill()
    assert reimage.returncode == 0, output + (tmp / "reimage.log").read_text()[-4000:]
    reimaged_s = time.monotonic() - started
    state = D.host(D.login).check_output(f"sacct -n -X -j {job} -o State%20").strip()
    assert state == "COMPLETED", state
    assert D.host(host).check_output("cat /proc/sys/kernel/random/boot_id") != boot_before
    assert image_of(host)["version"] == new
    assert slurm_state(host) == "idle"
    record = last(host)
    assert record["image"] == f"compute@{new}" and record["state"] in ("current", "changed"), record
    (WORKDIR / "reimage-timings.json").write_text(
        json.dumps({"host": host, "image_build_s": round(build_s, 1), "build_to_idle_s": round(reimaged_s, 1)}) + "\n"
    )
