"""Monitoring: the checks (one row per mistake, as an edit of the embedded HAL description),
the rendered telegraf.conf per role (valid TOML, the inputs the model gives the role, the
Slurm collector on the controller alone, no password), and the sandbox's narrowing."""

from __future__ import annotations

import json
import tomllib

import pytest

from hal_provision.checks import REGISTRY
from hal_provision.findings import Level
from hal_provision.model.monitoring import INPUTS
from hal_provision.render import monitoring, render_all

E, W = Level.error, Level.warning

COMPUTE = "    compute: [cpu, mem, system, disk, net, processes, nvidia_smi, gpu, infiniband, bmc]\n"
LOGIN = "    login: [cpu, mem, system, disk, net, processes, infiniband, storage_responsiveness]\n"
MGMT = "    management: [cpu, mem, system, disk, net, processes, slurm, bmc]\n"
INTERVAL = "  interval_seconds: 60 "

ROWS = [
    ("unknown-input", [(COMPUTE, COMPUTE.replace("processes,", "processes, ipmi,"))],
     E, "monitoring.inputs.compute[6]", "unknown input 'ipmi'"),
    ("unknown-input-suggests", [(LOGIN, LOGIN.replace("storage_responsiveness", "storage_responsivenes"))],
     E, "monitoring.inputs.login[7]", "did you mean 'storage_responsiveness'?"),
    ("input-twice", [(COMPUTE, COMPUTE.replace("bmc]", "bmc, cpu]"))],
     E, "monitoring.inputs.compute[10]", "input 'cpu' is listed twice"),
    ("gpu-input-without-gpus", [(LOGIN, LOGIN.replace("processes,", "processes, nvidia_smi,"))],
     E, "monitoring.inputs.login[6]", "nvidia_smi reads GPUs, but no login node has any"),
    ("gpu-collector-without-gpus", [(MGMT, MGMT.replace("bmc]", "bmc, gpu]"))],
     E, "monitoring.inputs.management[8]", "gpu reads GPUs, but no management node has any"),
    ("infiniband-without-fabric", [lambda t: t[: t.index("\nfabric:\n")] + t[t.index("\nhardware:\n"):]],
     E, "monitoring.inputs.compute[8]", "infiniband reads InfiniBand port counters, but the description has no fabric"),
    ("slurm-collector-off-the-controller", [(MGMT, MGMT.replace(" slurm,", "")),
                                            (LOGIN, LOGIN.replace("processes,", "processes, slurm,"))],
     E, "monitoring.inputs.login[6]", "the slurm collector runs on the slurmctld host (hal-mgmt1), which is not a "
                                      "login node"),
    ("interval-shorter-than-a-collector", [(INTERVAL, "  interval_seconds: 20 ")],
     E, "monitoring.interval_seconds", "interval 20 s is shorter than the bmc input needs for one run (30 s)"),
    ("panel-without-an-input", [(COMPUTE, COMPUTE.replace(" nvidia_smi,", "")),
                                ("    development: [cpu, mem, system, disk, net, processes, nvidia_smi,",
                                 "    development: [cpu, mem, system, disk, net, processes,")],
     E, "monitoring.grafana.dashboards[1]", "reads nvidia_smi.utilization_gpu, which no configured input writes: "
                                            "add nvidia_smi"),
    ("admin-dashboard-without-bmc", [(COMPUTE, COMPUTE.replace(", bmc]", "]")),
                                     (MGMT, MGMT.replace(", bmc]", "]")),
                                     ("    storage: [cpu, mem, system, disk, net, processes, infiniband, bmc]",
                                      "    storage: [cpu, mem, system, disk, net, processes, infiniband]"),
                                     ("nvidia_smi, gpu, infiniband, bmc]\n  grafana",
                                      "nvidia_smi, gpu, infiniband]\n  grafana")],
     E, "monitoring.grafana.dashboards[2]", "reads bmc.value, which no configured input writes: add bmc"),
    ("grafana-host-unknown", [("    host: hal-mgmt1                           # [assumed] beside",
                               "    host: hal-mgmt9                           # [assumed] beside")],
     E, "monitoring.grafana.host", "hal-mgmt9 is in no node group"),
    ("grafana-on-compute", [("    host: hal-mgmt1                           # [assumed] beside",
                             "    host: hal01                               # [assumed] beside")],
     W, "monitoring.grafana.host", "hal01 is a compute node; Grafana usually runs on a management node"),
    ("grafana-without-database", [("  monitoring_db: hal-mgmt1\n", "")],
     E, "services.monitoring_db", "Grafana reads InfluxDB, but services.monitoring_db names no host"),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


def test_every_monitoring_check_has_a_row():
    names = {name for name, fn in REGISTRY.items() if fn.__module__.endswith("checks.monitoring")}
    assert len(names) == 5
    assert len(ROWS) >= len(names)


@pytest.mark.parametrize(("old", "new", "dotted"), [
    pytest.param("retention: 90d,", "retention: 3 months,", "monitoring.influxdb.retention", id="retention-not-a-duration"),
    pytest.param(INTERVAL, "  interval_seconds: 0 ", "monitoring.interval_seconds", id="interval-zero"),
    pytest.param("    login: [cpu,", "    gateway: [cpu,", "monitoring.inputs", id="unknown-role"),
])
def test_structural_mistakes_are_refused_by_render(render_rejects, hal_text, old, new, dotted):
    assert old in hal_text
    render_rejects(hal_text.replace(old, new), dotted)


# ---- the rendered telegraf.conf --------------------------------------------------------------

def _inputs(conf: dict) -> list[str]:
    return sorted(name for name in conf["inputs"] if name != "exec") + sorted(
        cmd.split()[1] for e in conf["inputs"].get("exec", []) for cmd in e["commands"])


def test_one_telegraf_conf_per_role_with_its_inputs(hal, files):
    for role, names in hal.monitoring.inputs.items():
        conf = tomllib.loads(files[f"files/etc/telegraf/roles/{role.value}.conf"])
        builtin = sorted(n for n in names if INPUTS[n].kind == "builtin")
        assert _inputs(conf) == builtin + sorted(n for n in names if INPUTS[n].kind == "exec" and n != "slurm"), role
        assert conf["agent"]["interval"] == "60s" and conf["global_tags"] == {"cluster": "hal"}
        (out,) = conf["outputs"]["influxdb"]
        assert out["urls"] == ["http://hal-mgmt1:8086"] and out["database"] == "telegraf"
        assert out["username"] == "telegraf" and out["password"] == "${HAL_INFLUX_PASSWORD}"


def test_slurm_collector_only_on_the_controller(files):
    extra = [p for p in files if p.startswith("files/etc/telegraf/hosts/")]
    assert extra == ["files/etc/telegraf/hosts/hal-mgmt1/hal-slurm.conf"]
    conf = tomllib.loads(files[extra[0]])
    assert conf["inputs"]["exec"][0]["commands"] == ["/usr/local/bin/hal-collect slurm"]
    assert set(conf) == {"inputs"}


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
