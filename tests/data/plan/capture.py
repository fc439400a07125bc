"""Record `squeue --json` and `sinfo --json` from Debian's real Slurm 22.05 (run once, as root).

The plan's job-impact tests read what Slurm really prints, not a guess at its JSON. This
starts the acceptance harness's slurmctld on HAL's rendered configuration
(tests/acceptance/slurm_harness.py), and in the controller's private namespace one real
slurmd as hal16 (synthetic AC922 topology, fake /dev/nvidia0-3), then submits two jobs as
the model's users: jdoe's runs on hal16 with two GPUs, rsmith's asks for four nodes for 20
hours and stays pending. Harness-only changes to slurm.conf (no cgroups, no health check,
the node's declared hardware accepted) are listed below; none changes the JSON's shape.

    sudo .venv/bin/python tests/data/plan/capture.py tests/data/plan
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from hal_provision.loader import load  # noqa: E402
from tests.acceptance.slurm_harness import (  # noqa: E402
    Controller,
    Rewrite,
    Scratch,
    _prog,
    apply_rewrites,
    synthetic_topology,
)

NODE = "hal16"
USERS = {"jdoe": (100200, 100100, "astro-dl"), "rsmith": (100201, 100101, "bio-ml")}  # uid, gid, group (HAL model)
CAPTURE_REWRITES = [
    Rewrite("ProctrackType", "proctrack/linuxproc", "no cgroup delegation for a test slurmd"),
    Rewrite("TaskPlugin", "task/none", "no cgroup delegation for a test slurmd"),
    Rewrite("JobAcctGatherType", "jobacct_gather/none", "no cgroup delegation for a test slurmd"),
    Rewrite("PrologFlags", None, "Contain needs proctrack/cgroup"),
    Rewrite("HealthCheckProgram", None, "hal-healthcheck is not installed here"),
    Rewrite("HealthCheckInterval", None, "no health check"),
    Rewrite("HealthCheckNodeState", None, "no health check"),
    Rewrite("SlurmdParameters", "config_overrides", "the declared AC922 is emulated", add_if_missing=True),
]


def main(out_dir: Path) -> None:
    cluster = load(None).model
    scratch = Scratch.create(cluster)
    scratch.install_harness_configs()
    conf = scratch.slurm_conf
    conf.write_text(apply_rewrites(conf.read_text(), CAPTURE_REWRITES, "slurm.conf"))
    passwd = scratch.root / "passwd"
    group = scratch.root / "group"
    passwd.write_text(
        Path("/etc/passwd").read_text()
        + "".join(f"{name}:x:{uid}:{gid}::/tmp:/bin/sh\n" for name, (uid, gid, _group) in USERS.items())
    )
    group.write_text(
        Path("/etc/group").read_text()
        + "".join(f"{group_name}:x:{gid}:\n" for _name, (_uid, gid, group_name) in USERS.items())
    )
    controller = Controller(scratch, "hal-mgmt1")
    ns = controller.service.ns
    try:
        node_address = "172.22.1.16"
        for step in (
            ["ip", "addr", "add", f"{node_address}/32", "dev", "lo"],
            ["mount", "--bind", str(passwd), "/etc/passwd"],
            ["mount", "--bind", str(group), "/etc/group"],
        ):
            subprocess.run(ns.argv(*step), check=True)
        profile = cluster.hardware["ac922"]
        xml = scratch.root / "ac922.xml"
        subprocess.run([_prog("lstopo"), "--input", synthetic_topology(profile), "--of", "xml", str(xml)], check=True)
        steps = [
            "mount -t tmpfs -o mode=755 none /dev",
            "mknod -m 666 /dev/null c 1 3",
            *(f"mknod -m 666 /dev/nvidia{i} c 195 {i}" for i in range(4)),
            "exec " + shlex.join([_prog("slurmd"), "-D", "-N", NODE, "-f", str(conf)]),
        ]
        slurmd = controller.service.spawn(
            "slurmd",
            "unshare",
            "--mount",
            "--",
            "sh",
            "-ec",
            "\n".join(steps),
            env={"HWLOC_XMLFILE": str(xml), "HWLOC_THISSYSTEM": "1"},
        )
        env = {"SLURM_CONF": str(conf)}
        for _ in range(100):
            state = ns.run("sinfo", "-h", "-n", NODE, "-o", "%T", env=env).stdout.strip()
            if state.startswith("idle"):
                break
            if slurmd.poll() is not None:
                raise SystemExit("slurmd exited:\n" + scratch.log("slurmd.log") + scratch.log("slurmd.out"))
            time.sleep(0.3)
        else:
            raise SystemExit(f"{NODE} is {state!r}, not idle:\n" + scratch.log("slurmd.log"))

        def submit(user: str, *args: str) -> str:
            uid, gid, _group = USERS[user]
            done = ns.run(
                "setpriv",
                f"--reuid={uid}",
                f"--regid={gid}",
                "--clear-groups",
                "sbatch",
                "--parsable",
                "--chdir=/tmp",
                "--output=/dev/null",
                *args,
                env=env,
            )
            if done.returncode != 0:
                raise SystemExit(f"sbatch as {user} failed: {done.stderr}")
            return done.stdout.strip()

        submit(
            "jdoe",
            "--job-name=resnet50",
            "--partition=gpu",
            f"--nodelist={NODE}",
            "--nodes=1",
            "--gres=gpu:v100:2",
            "--time=02:00:00",
            "--mem=64G",
            "--wrap=sleep 600",
        )
        submit(
            "rsmith",
            "--job-name=fold-sweep",
            "--partition=gpu",
            "--nodes=4",
            "--gres=gpu:v100:4",
            "--time=20:00:00",
            "--mem=200G",
            "--wrap=sleep 600",
        )
        for _ in range(100):
            states = ns.run("squeue", "-h", "-o", "%T", env=env).stdout.split()
            if "RUNNING" in states and "PENDING" in states:
                break
            time.sleep(0.3)
        time.sleep(2)  # let the pending job's reason settle after a scheduling pass
        out_dir.mkdir(parents=True, exist_ok=True)
        for command, name in ((["squeue", "--json"], "squeue.json"), (["sinfo", "--json"], "sinfo.json")):
            done = ns.run(*command, env=env)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed: {done.stderr}")
            json.loads(done.stdout)
            (out_dir / name).write_text(done.stdout)
            print(f"wrote {out_dir / name}")
    finally:
        controller.close()
        scratch.remove()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
