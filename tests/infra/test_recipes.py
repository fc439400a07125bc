"""The training recipes on the deployed cluster: the rendered job scripts and the recipe
programs on every login, development and compute node, and the multi-node launch path.

The sandbox has no GPU framework and no GPU, so the launch is proven with the recipe's own
job script and `--wiring-probe`: the same swbatch request, the same one-srun-task-per-GPU
launch and the same rendezvous settings the recipe passes to PyTorch (slurmenv), without
PyTorch. Every rank must join one world (rank 0 on the job's first node gathers them over TCP)
with distinct ranks, its node's local ranks, and a GPU device of its own that the job may open.
"""

from __future__ import annotations

import collections
import json
import re
import uuid
from pathlib import Path

import pytest

from deployed import deployed

D = deployed()
FACTS = json.loads(D.rendered("etc/hal-provision/recipes.json") or "null")
pytestmark = pytest.mark.skipif(FACTS is None, reason="the model has no recipes section")
PROGRAMS = Path(__file__).resolve().parents[2] / "hal_provision" / "node" / "recipes"
HOSTS = D.hosts_in("role_login", "role_development", "role_compute")
TABLE = json.loads(D.rendered("etc/swsuite/virtual-partitions.json") or '{"virtual_partitions": {}}')[
    "virtual_partitions"
]


def _spanning_partition() -> tuple[str, int, int] | None:
    """The GPU virtual partition whose jobs fill the most whole compute nodes of the cluster
    (at least two): name, nodes, GPUs per node."""
    nodes = len(D.hosts_in("slurm_nodes"))
    best = None
    for name, vp in TABLE.items():
        per_node = len(vp.get("node", {}).get("gpu_sockets", []))
        if vp["kind"] != "gpu" or not per_node or vp["gpus"] % per_node:
            continue
        span = vp["gpus"] // per_node
        if 2 <= span <= nodes and (best is None or span > best[1]):
            best = (name, span, per_node)
    return best


SPANNING = _spanning_partition() if FACTS else None


def swbatch_recipe(vp: str, options: str, minutes: int, prepare: str = "") -> tuple[str, str]:
    """Submit the recipe's job script as the test user from a fresh work directory in the home
    (after `prepare`, run there, where WORK names it), with a time limit of `minutes`, wait for
    it, and return (job id, output); the directory is removed afterwards."""
    script = f"{FACTS['recipes']['resnet50']['dir']}/resnet50.swbatch"
    work = f"hal-recipe-{uuid.uuid4().hex[:8]}"
    try:
        D.user_ok(f"mkdir -p ~/{work} && cd ~/{work} && WORK=$HOME/{work} && {prepare or 'true'}")
        submitted = D.user_ok(
            f"cd ~/{work} && WORK=$HOME/{work} && swbatch -p {vp} -t 0:{minutes:02d} --wait "
            f"--output=$HOME/{work}/job.out {script} {options}",
            timeout=60 * minutes + 120,
        )
        job = re.search(r"Submitted batch job (\d+)", submitted)
        assert job, submitted
        return job.group(1), D.user_ok(f"cat ~/{work}/job.out")
    finally:
        D.as_user(D.login, f"rm -rf ~/{work}", 30)


@pytest.mark.parametrize("host", HOSTS)
def test_recipe_files_are_installed(host):
    node = D.host(host)
    for recipe in FACTS["recipes"].values():
        for name in recipe["rendered"]:
            f = node.file(f"{recipe['dir']}/{name}")
            assert f.content_string == D.rendered(f"{recipe['dir'].lstrip('/')}/{name}"), f"{host}:{f.path}"
            assert f.user == "root" and f.mode == (0o755 if name.endswith((".sh", ".swbatch")) else 0o644), (
                f"{host}:{f.path} {f.user} {oct(f.mode)}"
            )
        for name in recipe["programs"]:
            f = node.file(f"{recipe['dir']}/{name}")
            assert f.content_string == (PROGRAMS / name).read_text(), f"{host}:{f.path}"


@pytest.mark.parametrize("host", HOSTS)
def test_recipe_commands_are_on_the_path_and_run(host):
    """/usr/local/bin/hal-stage (the role's default recipes_bin_dir) leads to the rendered script,
    and the node's python3 runs the program behind it."""
    node = D.host(host)
    for recipe in FACTS["recipes"].values():
        for command in recipe.get("commands", []):
            link = node.file(f"/usr/local/bin/{command['name']}")
            assert link.is_symlink and link.linked_to == f"{recipe['dir']}/{command['script']}", f"{host}:{link.path}"
            ran = node.run(f"/usr/local/bin/{command['name']} --help")
            assert ran.rc == 0 and "usage:" in ran.stdout, f"{host}: {ran.stderr}"


@pytest.mark.skipif(SPANNING is None, reason="no GPU virtual partition spans two or more of the compute nodes")
def test_wiring_probe_joins_every_gpu_of_a_multi_node_job_in_one_world():
    vp, nodes, per_node = SPANNING
    job, output = swbatch_recipe(vp, "--wiring-probe", 10)
    world = nodes * per_node
    summary = re.search(r"^WIRING OK world=(\d+) nodes=(\d+) per_node=(\d+)", output, re.M)
    assert summary and summary.groups() == (str(world), str(nodes), str(per_node)), (
        f"swbatch -p {vp} resnet50.swbatch --wiring-probe (job {job}):\n{output}"
    )
    (records_line,) = [ln for ln in output.splitlines() if ln.startswith("WIRING {") or ln.startswith("WIRING [")]
    doc = json.loads(records_line.split(" ", 1)[1])
    records = doc["records"] if isinstance(doc, dict) else doc
    # Checked here again, independently of the probe's own verdict.
    assert sorted(r["rank"] for r in records) == list(range(world)), records
    by_host = collections.defaultdict(list)
    for r in records:
        by_host[r["hostname"]].append(r)
    assert len(by_host) == nodes and set(by_host) <= set(D.hosts_in("slurm_nodes")), sorted(by_host)
    for host, rs in by_host.items():
        assert sorted(r["local_rank"] for r in rs) == list(range(per_node)), (host, rs)
        assert len({r["device_path"] for r in rs}) == per_node and all(r["device_ok"] for r in rs), (host, rs)
    assert len({(r["master_addr"], r["master_port"], r["world_size"]) for r in records}) == 1, records


@pytest.mark.skipif(SPANNING is None, reason="no GPU virtual partition spans two or more of the compute nodes")
def test_a_staged_run_reads_its_data_from_the_jobs_local_scratch():
    """resnet50.swbatch --wiring-probe --data DIR --stage: on each node one task copies the data
    set from the shared home to the job's private /tmp, which lies on the node's local scratch
    (job_container.conf's base), and every rank reads the whole copy from there."""
    scratch = json.loads(D.rendered("etc/hal-provision/scratch.json") or "null")
    if scratch is None:
        pytest.skip("no hardware profile of the model has a local scratch")
    vp, nodes, per_node = SPANNING
    sizes = [50000 + i * 1000 for i in range(1, 41)]  # 40 files of random bytes, in two classes
    make = (
        "mkdir -p $WORK/ds/a $WORK/ds/b && for i in $(seq 1 40); do head -c $((50000 + i * 1000)) /dev/urandom "
        "> $WORK/ds/$([ $((i % 2)) = 0 ] && echo a || echo b)/$i.JPEG; done"
    )
    job, output = swbatch_recipe(vp, "--wiring-probe --data $WORK/ds --stage", 10, make)
    head = re.search(r"^WIRING OK world=\d+ nodes=(\d+) .* staged=40 files (\d+) bytes ([\d.]+) s$", output, re.M)
    assert head and head.group(1) == str(nodes) and head.group(2) == str(sum(sizes)), output
    (body,) = [ln for ln in output.splitlines() if ln.startswith("WIRING {")]
    records = json.loads(body.split(" ", 1)[1])["records"]
    copies = collections.Counter(r["hostname"] for r in records if r["data"]["copied"])
    assert copies == {h: 1 for h in {r["hostname"] for r in records}}, records  # one copy per node
    for r in records:
        d = r["data"]
        want = scratch["profiles"][scratch["groups"][D.hostvars[r["hostname"]]["hal_node_group"]]]
        # The copy lies in the job's /tmp, a bind of <base>/<job>/... on the scratch device.
        assert d["path"].startswith("/tmp/") and d["read_bytes"] == d["bytes"], d
        assert d["mount_source"] == want["source"] and f"/{job}/" in d["mount_root"] + "/", d
    print(
        f"staged {head.group(2)} bytes per node in {head.group(3)} s (the slowest node); records: "
        + json.dumps([r["data"] for r in records])[:400]
    )


def _cpu_partition() -> tuple[str, int] | None:
    """The cpu virtual partition with the most whole nodes the cluster has (at least two)."""
    nodes = len(D.hosts_in("slurm_nodes"))
    fits = [(vp["nodes"], name) for name, vp in TABLE.items() if vp["kind"] == "cpu" and 2 <= vp["nodes"] <= nodes]
    return (max(fits)[1], max(fits)[0]) if fits else None


CPU_SPAN = _cpu_partition() if FACTS else None
SOFTWARE = json.loads(D.rendered("etc/hal-provision/software.json") or "{}").get("lmod") or {}
CPU_TORCH = [env for env in SOFTWARE.get("environments", []) if any(p.startswith("torch") for p in env["packages"])]


@pytest.mark.skipif(
    CPU_SPAN is None or not CPU_TORCH,
    reason="no cpu virtual partition of two or more nodes, or no PyTorch module environment",
)
def test_the_recipe_trains_on_the_cpus_of_two_nodes_over_gloo():
    """swbatch -p cpunN resnet50.swbatch on CPUs: the job script's CPU branch (a task per socket,
    from the hardware profile), the CPU PyTorch module the lmod role built, gloo across the
    nodes; the recipe's RESULT says every rank's parameters are equal and the loss fell, and
    the ranks' own lines are checked here too. The sandbox's nodes share this machine's two
    cores: one thread per rank (--threads 1), ResNet-18 on 32-pixel images."""
    vp, nodes = CPU_SPAN
    options = (
        "--data synthetic --arch resnet18 --image-size 32 --batch-per-rank 8 --epochs 1 --steps-per-epoch 30 "
        "--warmup-steps-timing 5 --log-every 10 --threads 1"
    )
    job, output = swbatch_recipe(vp, options, 20)
    lines = [ln for ln in output.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"swbatch -p {vp} resnet50.swbatch {options} (job {job}) ended without RESULT:\n{output[-3000:]}"
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["device"] == "cpu" and result["nodes"] == nodes and result["ranks"] >= 2, result
    assert "gloo" in output, output[-2000:]
    # The recipe's own checks, and the figures they rest on.
    assert result["params_equal"] is True and result["loss_fell"] is True, result
    digests = result["params_digests"]  # every rank's SHA-256 of its parameters, in rank order
    assert len(digests) == result["ranks"] and len(set(digests)) == 1, digests
    assert result["loss_last"] < result["loss_first"], result
    assert result["images_per_second"] > 0 and result["per_node"] > 0, result
    print(
        f"{vp}: {result['ranks']} ranks on {result['nodes']} nodes, {result['images_per_second']:.1f} images/s, "
        f"loss {result['loss_first']:.3f} -> {result['loss_last']:.4f}, params sha256 {digests[0][:12]} on every rank"
    )
