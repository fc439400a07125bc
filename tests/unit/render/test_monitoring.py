"""Monitoring: the checks (one row per mistake, as an edit of the embedded HAL description),
the rendered telegraf.conf per role (valid TOML, the inputs the model gives the role, the
Slurm collector on the controller alone, the backup collector and its sudoers rule on each host
with backup jobs, no password), and the sandbox's narrowing."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from hal_provision.findings import Level
from hal_provision.model import Role
from hal_provision.model.monitoring import INPUTS
from hal_provision.render import monitoring, render_all

E, W = Level.error, Level.warning

COMPUTE = "    compute: [cpu, mem, system, disk, net, processes, nvidia_smi, gpu, infiniband, bmc]\n"
LOGIN = "    login: [cpu, mem, system, disk, net, processes, infiniband, storage_responsiveness]\n"
MGMT = "    management: [cpu, mem, system, disk, net, processes, slurm, bmc]\n"
INTERVAL = "  interval_seconds: 60 "
GRAFANA = "  grafana:                                    # [paper] status, utilization and admin dashboards\n"

ROWS = [
    (
        "unknown-input",
        [(COMPUTE, COMPUTE.replace("processes,", "processes, ipmi,"))],
        E,
        "monitoring.inputs.compute[6]",
        "unknown input 'ipmi'",
    ),
    (
        "unknown-input-suggests",
        [(LOGIN, LOGIN.replace("storage_responsiveness", "storage_responsivenes"))],
        E,
        "monitoring.inputs.login[7]",
        "did you mean 'storage_responsiveness'?",
    ),
    (
        "input-twice",
        [(COMPUTE, COMPUTE.replace("bmc]", "bmc, cpu]"))],
        E,
        "monitoring.inputs.compute[10]",
        "input 'cpu' is listed twice",
    ),
    (
        "gpu-input-in-a-group-without-gpus",
        [(GRAFANA, "  inputs_by_group: {login: [cpu, nvidia_smi]}\n" + GRAFANA)],
        E,
        "monitoring.inputs_by_group.login[1]",
        "nvidia_smi reads GPUs, but the nodes of group login have none",
    ),
    (
        "gpu-collector-in-a-group-without-gpus",
        [(GRAFANA, "  inputs_by_group: {data: [cpu, gpu]}\n" + GRAFANA)],
        E,
        "monitoring.inputs_by_group.data[1]",
        "gpu reads GPUs, but the nodes of group data have none",
    ),
    (
        "inputs-of-an-unknown-group",
        [(GRAFANA, "  inputs_by_group: {compte: [cpu]}\n" + GRAFANA)],
        E,
        "monitoring.inputs_by_group.compte",
        "no node group is named 'compte'; did you mean 'compute'?",
    ),
    (
        "input-twice-in-a-group",
        [(GRAFANA, "  inputs_by_group: {dtn: [cpu, mem, cpu]}\n" + GRAFANA)],
        E,
        "monitoring.inputs_by_group.dtn[2]",
        "input 'cpu' is listed twice",
    ),
    (
        "slurm-collector-in-another-group",
        [(GRAFANA, "  inputs_by_group: {mgmt-aux: [cpu, slurm]}\n" + GRAFANA)],
        E,
        "monitoring.inputs_by_group.mgmt-aux[1]",
        "the slurm collector runs on the slurmctld host (hal-mgmt1), which is not in group mgmt-aux",
    ),
    (
        "infiniband-without-fabric",
        [lambda t: t[: t.index("\nfabric:\n")] + t[t.index("\nhardware:\n") :]],
        E,
        "monitoring.inputs.compute[8]",
        "infiniband reads InfiniBand port counters, but the description has no fabric",
    ),
    (
        "slurm-collector-off-the-controller",
        [(MGMT, MGMT.replace(" slurm,", "")), (LOGIN, LOGIN.replace("processes,", "processes, slurm,"))],
        E,
        "monitoring.inputs.login[6]",
        "the slurm collector runs on the slurmctld host (hal-mgmt1), which is not a login node",
    ),
    (
        "backup-collector-listed",
        [(MGMT, MGMT.replace("bmc]", "bmc, backup]"))],
        E,
        "monitoring.inputs.management[8]",
        "the backup collector is not listed: it runs on every host with backup "
        "jobs whenever the description has a backup section",
    ),
    (
        "interval-shorter-than-a-collector",
        [(INTERVAL, "  interval_seconds: 20 ")],
        E,
        "monitoring.interval_seconds",
        "interval 20 s is shorter than the bmc input needs for one run (30 s)",
    ),
    (
        "panel-without-an-input",
        [
            (COMPUTE, COMPUTE.replace(" nvidia_smi,", "")),
            (
                "    development: [cpu, mem, system, disk, net, processes, nvidia_smi,",
                "    development: [cpu, mem, system, disk, net, processes,",
            ),
        ],
        E,
        "monitoring.grafana.dashboards[1]",
        "reads nvidia_smi.utilization_gpu, which no configured input writes: add nvidia_smi",
    ),
    (
        "admin-dashboard-without-bmc",
        [
            (COMPUTE, COMPUTE.replace(", bmc]", "]")),
            (MGMT, MGMT.replace(", bmc]", "]")),
            (
                "    storage: [cpu, mem, system, disk, net, processes, infiniband, bmc]",
                "    storage: [cpu, mem, system, disk, net, processes, infiniband]",
            ),
            ("nvidia_smi, gpu, infiniband, bmc]\n  grafana", "nvidia_smi, gpu, infiniband]\n  grafana"),
        ],
        E,
        "monitoring.grafana.dashboards[2]",
        "reads bmc.value, which no configured input writes: add bmc",
    ),
    (
        "grafana-host-unknown",
        [
            (
                "    host: hal-mgmt1                           # [assumed] beside",
                "    host: hal-mgmt9                           # [assumed] beside",
            )
        ],
        E,
        "monitoring.grafana.host",
        "hal-mgmt9 is in no node group",
    ),
    (
        "grafana-on-compute",
        [
            (
                "    host: hal-mgmt1                           # [assumed] beside",
                "    host: hal01                               # [assumed] beside",
            )
        ],
        W,
        "monitoring.grafana.host",
        "hal01 is a compute node; Grafana usually runs on a management node",
    ),
    (
        "grafana-without-database",
        [("  monitoring_db: hal-mgmt1\n", "")],
        E,
        "services.monitoring_db",
        "Grafana reads InfluxDB, but services.monitoring_db names no host",
    ),
    (
        "influxdb-https-without-a-ca",
        [("  ldap: hal-mgmt1\n", "")],
        E,
        "monitoring.influxdb.tls",
        "InfluxDB over HTTPS needs the cluster CA, which lives on the directory host, but services.ldap names no host",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


@pytest.mark.parametrize(
    ("old", "new", "dotted"),
    [
        pytest.param(
            "retention: 90d,", "retention: 3 months,", "monitoring.influxdb.retention", id="retention-not-a-duration"
        ),
        pytest.param(INTERVAL, "  interval_seconds: 0 ", "monitoring.interval_seconds", id="interval-zero"),
        pytest.param("    login: [cpu,", "    gateway: [cpu,", "monitoring.inputs", id="unknown-role"),
        pytest.param(
            GRAFANA,
            "  inputs_by_group: {login: []}\n" + GRAFANA,
            "monitoring.inputs_by_group.login",
            id="empty-group-list",
        ),
    ],
)
def test_structural_mistakes_are_refused_by_render(render_rejects, hal_text, old, new, dotted):
    assert old in hal_text
    render_rejects(hal_text.replace(old, new), dotted)


# ---- the rendered telegraf.conf --------------------------------------------------------------


def _inputs(conf: dict) -> list[str]:
    return sorted(name for name in conf["inputs"] if name != "exec") + sorted(
        cmd.split()[1] for e in conf["inputs"].get("exec", []) for cmd in e["commands"]
    )


def test_one_telegraf_conf_per_role_with_its_inputs(hal, files):
    for role, names in hal.monitoring.inputs.items():
        conf = tomllib.loads(files[f"files/etc/telegraf/roles/{role.value}.conf"])
        builtin = sorted(n for n in names if INPUTS[n].kind == "builtin")
        assert _inputs(conf) == builtin + sorted(n for n in names if INPUTS[n].kind == "exec" and n != "slurm"), role
        assert conf["agent"]["interval"] == "60s" and conf["global_tags"] == {"cluster": "hal"}
        (out,) = conf["outputs"]["influxdb"]
        assert out["urls"] == ["https://hal-mgmt1:8086"] and out["database"] == "telegraf"
        assert out["username"] == "telegraf" and out["password"] == "${HAL_INFLUX_PASSWORD}"


def test_slurm_collector_only_on_the_controller(files):
    extra = [p for p in files if p.startswith("files/etc/telegraf/hosts/") and "/hal-slurm." in p]
    assert extra == ["files/etc/telegraf/hosts/hal-mgmt1/hal-slurm.conf"]
    conf = tomllib.loads(files[extra[0]])
    assert conf["inputs"]["exec"][0]["commands"] == ["/usr/local/bin/hal-collect slurm"]
    assert set(conf) == {"inputs"}


# ---- the backup collector: from the backup section, on each host with backup jobs ----------------

BACKUP_COMMAND = "/usr/bin/sudo -n /usr/local/sbin/hal-backup age --influx"
TELEGRAF_VARS = Path(__file__).resolve().parents[3] / "roles" / "telegraf" / "vars" / "Debian.yml"


def _host_files(files: dict[str, str], name: str) -> dict[str, str]:
    """host -> text of files/etc/telegraf/hosts/<host>/<name>."""
    prefix = "files/etc/telegraf/hosts/"
    return {
        p[len(prefix) :].split("/")[0]: text
        for p, text in files.items()
        if p.startswith(prefix) and p.endswith(f"/{name}")
    }


def test_backup_collector_runs_on_exactly_the_hosts_of_backup_jobs(hal, files):
    from hal_provision.model.monitoring import backup_collector_hosts, running_inputs

    job_hosts = {job["host"] for job in json.loads(files["files/etc/hal-provision/backup.json"])["jobs"]}
    confs = _host_files(files, "hal-backup.conf")
    assert set(confs) == job_hosts == {"hal-mgmt1", "hal-mgmt2"} == set(backup_collector_hosts(hal))
    assert set(_host_files(files, "hal-backup.sudoers")) == job_hosts
    for text in confs.values():
        conf = tomllib.loads(text)
        assert set(conf) == {"inputs"} and list(conf["inputs"]) == ["exec"]
        [exec_input] = conf["inputs"]["exec"]
        assert exec_input == {"commands": [BACKUP_COMMAND], "timeout": "8s", "data_format": "influx"}
    assert "backup" in running_inputs(hal) and "backup" not in hal.monitoring.all_inputs()
    # No node's own telegraf.conf runs it.
    assert not [p for p, text in files.items() if "/telegraf/" in p and "/hosts/" not in p and "hal-backup" in text]


@pytest.mark.parametrize("drop", ["backup", "monitoring"])
def test_no_backup_collector_without_a_backup_section_or_monitoring(hal, drop):
    from hal_provision.model.monitoring import backup_collector_hosts, running_inputs

    model = hal.model_copy(update={drop: None})
    assert backup_collector_hosts(model) == [] and "backup" not in running_inputs(model)
    assert not [p for p in render_all(model) if "/telegraf/hosts/" in p and "/hal-backup." in p]


def _sudoers_rules(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_backup_sudoers_allows_the_telegraf_user_exactly_the_collectors_command(files):
    telegraf_user = yaml.safe_load(TELEGRAF_VARS.read_text())["__telegraf_user"]
    program_and_args = BACKUP_COMMAND.removeprefix("/usr/bin/sudo -n ")
    for host, text in _host_files(files, "hal-backup.sudoers").items():
        assert text.startswith("# Generated by hal-provision"), host
        assert not [line for line in text.splitlines() if line.startswith("#include")], host
        assert _sudoers_rules(text) == [
            f"Cmnd_Alias HAL_TELEGRAF_BACKUP_AGE = {program_and_args}",
            "Defaults!HAL_TELEGRAF_BACKUP_AGE !log_allowed, !pam_session",
            f"{telegraf_user} ALL = (root) NOPASSWD: HAL_TELEGRAF_BACKUP_AGE",
        ], host
    assert monitoring.TELEGRAF_USER == telegraf_user


VISUDO = shutil.which("visudo") or shutil.which("visudo", path="/usr/sbin:/sbin")


@pytest.mark.skipif(VISUDO is None, reason="needs visudo (Debian package sudo); not installed")
def test_backup_sudoers_passes_visudo(files, tmp_path):
    """visudo -cf, as the telegraf role's validate: runs it; and it refuses a broken copy (an
    unknown Defaults entry), so a pass means something."""
    [text, *_] = _host_files(files, "hal-backup.sudoers").values()
    rule = tmp_path / "telegraf-hal-backup"
    rule.write_text(text)
    done = subprocess.run([VISUDO, "-cf", str(rule)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    rule.write_text(text.replace("!log_allowed", "!log_allowd"))
    done = subprocess.run([VISUDO, "-cf", str(rule)], capture_output=True, text=True)
    assert done.returncode == 1 and "log_allowd" in done.stdout + done.stderr


def test_exec_timeouts_end_before_the_next_run(hal):
    for name, spec in INPUTS.items():
        if spec.kind == "exec":
            timeout = int(monitoring.exec_input(hal, name)["timeout"].rstrip("s"))
            assert 0 < timeout < hal.monitoring.interval_seconds, name


def test_facts_name_users_and_no_password(files):
    facts = json.loads(files["files/etc/hal-provision/monitoring.json"])
    assert facts["users"] == {"telegraf": "WRITE", "grafana": "READ"}
    assert (facts["database"], facts["retention"], facts["port"]) == ("telegraf", "90d", 8086)
    assert not any("password" in k and k != "password_env" for k in facts)


def test_agents_and_grafana_reach_influxdb_over_https_verified_by_the_cluster_ca(files):
    """HAL's default (monitoring.influxdb.tls): every agent's output and Grafana's datasource
    name https and the cluster CA's certificate, which the influxdb role has sign its own."""
    ca = "/etc/ssl/hal-provision/cluster-ca.crt"
    confs = [p for p in files if p.startswith("files/etc/telegraf/") and p.endswith(".conf") and "/hosts/" not in p]
    assert confs
    for path in confs:
        (out,) = tomllib.loads(files[path])["outputs"]["influxdb"]
        assert out["urls"] == ["https://hal-mgmt1:8086"] and out["tls_ca"] == ca, path
        assert out["insecure_skip_verify"] is False, path
    facts = json.loads(files["files/etc/hal-provision/monitoring.json"])
    assert (facts["tls"], facts["ca_file"], facts["ca_host"], facts["url"]) == (
        True,
        ca,
        "hal-mgmt1",
        "https://hal-mgmt1:8086",
    )
    (source,) = yaml.safe_load(files["files/etc/grafana/provisioning/datasources/hal.yaml"])["datasources"]
    assert source["url"] == "https://hal-mgmt1:8086"
    assert source["jsonData"]["tlsAuthWithCACert"] is True and source["jsonData"]["tlsSkipVerify"] is False
    # The grafana role puts the certificate's PEM in place of this (roles/grafana/vars/main.yml).
    grafana_vars = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles/grafana/vars/main.yml").read_text())
    assert source["secureJsonData"]["tlsCACert"] == grafana_vars["__grafana_ca_marker"] == "$__file{" + ca + "}"


def test_plain_http_only_when_the_model_says_so(hal):
    m = hal.monitoring
    plain = hal.model_copy(
        update={"monitoring": m.model_copy(update={"influxdb": m.influxdb.model_copy(update={"tls": False})})}
    )
    files = render_all(plain)
    (out,) = tomllib.loads(files["files/etc/telegraf/roles/compute.conf"])["outputs"]["influxdb"]
    assert out["urls"] == ["http://hal-mgmt1:8086"] and "tls_ca" not in out
    (source,) = yaml.safe_load(files["files/etc/grafana/provisioning/datasources/hal.yaml"])["datasources"]
    assert source["url"] == "http://hal-mgmt1:8086" and "tlsCACert" not in source["secureJsonData"]
    assert json.loads(files["files/etc/hal-provision/monitoring.json"])["tls"] is False


def test_storage_probe_lists_the_models_path(files):
    conf = tomllib.loads(files["files/etc/telegraf/roles/login.conf"])
    assert "/usr/local/bin/hal-collect storage_responsiveness /home" in conf["inputs"]["exec"][0]["commands"]


def test_no_monitoring_renders_nothing(hal):
    bare = hal.model_copy(update={"monitoring": None})
    assert not [p for p in render_all(bare) if "telegraf" in p or "grafana" in p or "monitoring" in p]


# ---- the sandbox's narrowing -------------------------------------------------------------------


def test_sandbox_keeps_the_stack_on_the_management_host(hal):
    from hal_provision.checks import run_all
    from hal_provision.sandbox.derive import SANDBOX_INTERVAL_SECONDS, derive_sandbox

    sb = derive_sandbox(hal)
    assert sb.monitoring.grafana.host == "hal-mgmt1" and sb.services.monitoring_db == "hal-mgmt1"
    assert sb.monitoring.interval_seconds == SANDBOX_INTERVAL_SECONDS
    assert all("infiniband" not in names for names in sb.monitoring.inputs.values())
    assert [f for f in run_all(sb) if f.level == Level.error] == []


# ---- inputs per node group: GPU inputs only where there are GPUs ------------------------------

TWOGEN = Path(__file__).parents[2] / "data" / "clusters" / "x86-twogen.yml"
GPU_INPUTS = {name for name, spec in INPUTS.items() if spec.needs == "gpus"}


def _twogen(**monitoring) -> dict:
    """TWOGEN with a third, CPU-only compute group (`cpu`, in the gpu partition), GPU inputs and
    the BMC collector on the compute role, and `monitoring` merged into its monitoring section."""
    data = yaml.safe_load(TWOGEN.read_text())
    data["hardware"]["epyc"] = {k: v for k, v in data["hardware"]["hgx-a100"].items() if k not in ("gpus", "features")}
    data["nodes"].append(
        {
            "name": "cpu",
            "role": "compute",
            "hosts": "tg[09-10]",
            "hardware": "epyc",
            "addresses": {"mgmt": "10.20.1.9", "bmc": "10.21.1.9"},
        }
    )
    data["slurm"]["partitions"][0]["nodes"] = "tg[01-10]"
    data["monitoring"]["inputs"]["compute"] += ["gpu", "bmc"]
    data["monitoring"].update(monitoring)
    return data


def _load(data: dict):
    from hal_provision.loader import load_text

    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "twogen-cpu.yml")
    return loaded.model, loaded.findings


def test_gpu_inputs_only_on_groups_with_gpus():
    model, findings = _load(_twogen())
    assert [f.format() for f in findings if f.level in (E, W) and f.path[:1] == ("monitoring",)] == []
    files = monitoring.render(model)
    compute = tomllib.loads(files["files/etc/telegraf/roles/compute.conf"])  # a100 and h100 share it
    assert GPU_INPUTS <= set(_inputs(compute)) and "bmc" in _inputs(compute)
    cpu = tomllib.loads(files["files/etc/telegraf/groups/cpu.conf"])
    assert not GPU_INPUTS & set(_inputs(cpu))
    assert set(_inputs(cpu)) == set(_inputs(compute)) - GPU_INPUTS
    assert not [p for p in files if "/groups/" in p and not p.endswith("/cpu.conf")]
    paths = {g.name: monitoring.conf_path(model, g) for g in model.nodes}
    assert paths["a100"] == paths["h100"] == "files/etc/telegraf/roles/compute.conf"
    assert paths["cpu"] == "files/etc/telegraf/groups/cpu.conf"


def test_a_groups_own_list_replaces_its_roles():
    model, findings = _load(_twogen(inputs_by_group={"h100": ["cpu", "mem", "nvidia_smi"], "cpu": ["cpu", "bmc"]}))
    assert not [f for f in findings if f.level == E]
    files = monitoring.render(model)
    assert _inputs(tomllib.loads(files["files/etc/telegraf/groups/h100.conf"])) == ["cpu", "mem", "nvidia_smi"]
    assert _inputs(tomllib.loads(files["files/etc/telegraf/groups/cpu.conf"])) == ["cpu", "bmc"]  # built-in first
    assert monitoring.conf_path(model, model.nodes[3]) == "files/etc/telegraf/roles/compute.conf"  # a100


def test_no_gpu_warning_for_a_role_with_a_cpu_only_group():
    _, findings = _load(_twogen())
    assert not [f for f in findings if "GPU" in f.message]


def test_several_roles_run_every_roles_inputs(hal):
    from hal_provision.model.monitoring import group_inputs

    group = hal.nodes[1].model_copy(update={"also": [Role.login]})  # mgmt-main, also a login node
    names = group_inputs(hal, group)
    assert names == list(dict.fromkeys(hal.monitoring.inputs[Role.management] + hal.monitoring.inputs[Role.login]))
