"""Monitoring: Telegraf's configuration per node role or group, and the database facts the roles need.

* ``files/etc/telegraf/roles/<role>.conf``: the telegraf.conf of every node of that role: the
  agent's interval, the cluster as a global tag, one InfluxDB output (the write-only
  ``telegraf`` user; its password is ``${HAL_INFLUX_PASSWORD}``, which Telegraf reads from
  /etc/default/telegraf, made on the node), and the role's inputs: Telegraf's own, and the
  toolkit's collectors through ``inputs.exec`` running ``hal-collect <collector>``.
* ``files/etc/telegraf/groups/<group>.conf``: the same, for a node group whose inputs differ
  from its role's list (its own list in monitoring.inputs_by_group, several roles, or no GPUs
  for the role's GPU inputs). The telegraf role takes a group's file where there is one, else
  its role's; conf_path says which.
* ``files/etc/telegraf/hosts/<host>/hal-slurm.conf``: the Slurm collector, for the slurmctld
  host alone (a second copy elsewhere would count every job twice).
* ``files/etc/telegraf/hosts/<host>/hal-backup.conf``: the backup collector, on every host with
  backup jobs (model.monitoring.backup_collector_hosts): ``sudo -n hal-backup age --influx``.
  Each reports its own jobs, from its own destination (a job whose host stops reporting counts
  as missing on the dashboard). Root, because the secret jobs' snapshots and the manifests' key
  are root's alone (as the telegraf user, `age` could not read them); ``hal-backup.sudoers`` beside it lets the
  telegraf user run exactly that command line as root, and nothing else (the telegraf role
  installs it into /etc/sudoers.d, checked by visudo).
* ``files/etc/hal-provision/monitoring.json``: database, retention, port and users for the
  influxdb role, and whether its HTTP API is HTTPS (monitoring.influxdb.tls: a certificate the
  cluster CA signs; the agents' output names the CA file, /etc/ssl/hal-provision/cluster-ca.crt,
  that verifies it); no password.

TOML is written here from plain values (strings through json.dumps, which TOML's basic
strings accept) and parsed back with tomllib before it is returned, so a rendered file is
always valid TOML.
"""

from __future__ import annotations

import json
import tomllib

from ..hostlist import nodeset
from ..model import Cluster, NodeGroup
from ..model.monitoring import HOST_ONLY, INPUTS, backup_collector_hosts, group_inputs
from .accounts import CA_CERT
from .backup import PROGRAM as BACKUP_PROGRAM
from .common import header, json_comment

COLLECT = "/usr/local/bin/hal-collect"
SUDO = "/usr/bin/sudo"
# The system user Telegraf's package makes and the stand-in runs as (the telegraf role's
# __telegraf_user; tests/unit/render/test_monitoring.py compares the two).
TELEGRAF_USER = "telegraf"
BACKUP_AGE = f"{BACKUP_PROGRAM} age --influx"  # what the sudoers rule allows, argument for argument
PASSWORD_ENV = "HAL_INFLUX_PASSWORD"  # in /etc/default/telegraf, made by the telegraf role
USERS = {  # InfluxDB users and what they may do (the influxdb role grants exactly this)
    "telegraf": "WRITE",
    "grafana": "READ",
}
# Telegraf's options for its own inputs, beyond the defaults.
BUILTIN_OPTIONS: dict[str, dict] = {
    "cpu": {"percpu": False, "totalcpu": True, "collect_cpu_time": False, "report_active": False},
    "mem": {},
    "system": {},
    "disk": {"ignore_fs": ["tmpfs", "devtmpfs", "devfs", "iso9660", "overlay", "aufs", "squashfs"]},
    "net": {"ignore_protocol_stats": True},
    "processes": {},
    "nvidia_smi": {"bin_path": "/usr/bin/nvidia-smi", "timeout": "5s"},
    "infiniband": {},
}


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def _table(out: list[str], name: str, values: dict, array: bool = True) -> None:
    out.append(f"\n[[{name}]]\n" if array else f"\n[{name}]\n")
    for key, v in values.items():
        out.append(f"  {key} = {_value(v)}\n")


def exec_input(cluster: Cluster, name: str) -> dict:
    """inputs.exec for one of HAL's collectors: its command, and a timeout that ends one run
    before the next is due."""
    spec = INPUTS[name]
    args = [COLLECT, name]
    if name == "storage_responsiveness":
        args.append(cluster.monitoring.storage_probe_path)
    if name == "backup":  # -n: fail at once, never wait for a password, should the rule be missing
        args = [SUDO, "-n", BACKUP_AGE]
    return {
        "commands": [" ".join(args)],
        "timeout": f"{max(5, min(spec.min_interval_seconds, cluster.monitoring.interval_seconds) - 2)}s",
        "data_format": "influx",
    }


def influx_url(cluster: Cluster) -> str:
    """InfluxDB's HTTP API as the agents and Grafana reach it: https (monitoring.influxdb.tls) by
    the database host's name, which its certificate names."""
    m = cluster.monitoring
    db_host = nodeset(cluster.services.monitoring_db)[0] if cluster.services.monitoring_db else "localhost"
    return f"{'https' if m.influxdb.tls else 'http'}://{db_host}:{m.influxdb.port}"


def telegraf_conf(cluster: Cluster, inputs: list[str], what: str) -> str:
    m = cluster.monitoring
    out = [header(cluster), f"# Telegraf on {what}: inputs {', '.join(inputs) or 'none'}.\n"]
    _table(out, "global_tags", {"cluster": cluster.cluster.name}, array=False)
    _table(
        out,
        "agent",
        {
            "interval": f"{m.interval_seconds}s",
            "round_interval": True,
            "metric_batch_size": 1000,
            "metric_buffer_limit": 10000,
            "collection_jitter": "0s",
            "flush_interval": f"{m.interval_seconds}s",
            "flush_jitter": "0s",
            "omit_hostname": False,
        },
        array=False,
    )
    _table(
        out,
        "outputs.influxdb",
        {
            "urls": [influx_url(cluster)],
            "database": m.influxdb.database,
            "skip_database_creation": True,
            "username": "telegraf",
            "password": "${" + PASSWORD_ENV + "}",
            "timeout": "5s",
            # HTTPS: the server's certificate verified against the cluster CA, never skipped.
            **({"tls_ca": CA_CERT, "insecure_skip_verify": False} if m.influxdb.tls else {}),
        },
    )
    for name in inputs:
        if INPUTS[name].kind == "builtin":
            _table(out, f"inputs.{name}", BUILTIN_OPTIONS[name])
        else:
            _table(out, "inputs.exec", exec_input(cluster, name))
    text = "".join(out)
    tomllib.loads(text)  # a renderer bug must never reach a node
    return text


def _agent_inputs(names: list[str]) -> list[str]:
    """The inputs of a node's telegraf.conf: the Slurm collector goes to its host's own file
    (HOST_ONLY; the backup collector is never listed, but would too)."""
    return [n for n in names if INPUTS[n].needs not in HOST_ONLY]


def host_conf(cluster: Cluster, name: str, *what: str) -> str:
    """A host's own file with one of HAL's collectors; `what`: comment lines saying where it
    runs and why."""
    out = [header(cluster), *(f"# {line}\n" for line in what)]
    _table(out, "inputs.exec", exec_input(cluster, name))
    text = "".join(out)
    tomllib.loads(text)
    return text


def backup_sudoers(cluster: Cluster) -> str:
    """The sudoers drop-in beside hal-backup.conf: the telegraf user may run exactly the backup
    collector's command line as root. Its runs (one per collection interval) are not logged and
    open no PAM session; a refused attempt is still logged."""
    return (
        header(cluster)
        + f"""\
# Telegraf's exec input (hal-backup.conf beside this file) runs
# `{SUDO} -n {BACKUP_AGE}`, as root: the secret jobs' snapshots
# are readable by root alone. This command line, argument for argument, and no other.
Cmnd_Alias HAL_TELEGRAF_BACKUP_AGE = {BACKUP_AGE}
Defaults!HAL_TELEGRAF_BACKUP_AGE !log_allowed, !pam_session
{TELEGRAF_USER} ALL = (root) NOPASSWD: HAL_TELEGRAF_BACKUP_AGE
"""
    )


def conf_path(cluster: Cluster, group: NodeGroup) -> str | None:
    """The rendered telegraf.conf of a node group: its role's, where the group runs exactly the
    role's list, else its own; None: no agent on these nodes."""
    names = group_inputs(cluster, group)
    if names is None:
        return None
    if names == cluster.monitoring.inputs.get(group.role):
        return f"files/etc/telegraf/roles/{group.role.value}.conf"
    return f"files/etc/telegraf/groups/{group.name}.conf"


def render(cluster: Cluster) -> dict[str, str]:
    m = cluster.monitoring
    if m is None or m.backend != "influxdb" or cluster.services.monitoring_db is None:
        return {}
    files: dict[str, str] = {}
    for group in cluster.nodes:
        path = conf_path(cluster, group)
        if path is None or path in files:
            continue
        what = f"every {group.role.value} node" if "/roles/" in path else f"the nodes of group {group.name}"
        files[path] = telegraf_conf(cluster, _agent_inputs(group_inputs(cluster, group)), what)
    ctld = cluster.controllers[0] if cluster.controllers else None
    if ctld and any(INPUTS[n].needs == "slurm_controller" for n in m.all_inputs()):
        files[f"files/etc/telegraf/hosts/{ctld}/hal-slurm.conf"] = host_conf(
            cluster, "slurm", f"The Slurm collector, on the slurmctld host {ctld} alone."
        )
    backup_hosts = backup_collector_hosts(cluster)
    for host in backup_hosts:
        files[f"files/etc/telegraf/hosts/{host}/hal-backup.conf"] = host_conf(
            cluster,
            "backup",
            f"The backup collector, on each host with backup jobs ({', '.join(backup_hosts)}):",
            "the age of this host's jobs' last good snapshots on its own destination, run as root",
            "(hal-backup.sudoers).",
        )
        files[f"files/etc/telegraf/hosts/{host}/hal-backup.sudoers"] = backup_sudoers(cluster)
    facts = {
        "_comment": json_comment(cluster),
        "database": m.influxdb.database,
        "retention": m.influxdb.retention,
        "port": m.influxdb.port,
        "interval_seconds": m.interval_seconds,
        "users": USERS,
        "password_env": PASSWORD_ENV,
        # HTTPS: the influxdb role has the cluster CA (on ca_host) sign the server's certificate;
        # the agents, Grafana and the roles' own calls verify it with ca_file.
        "tls": m.influxdb.tls,
        "ca_file": CA_CERT,
        "ca_host": nodeset(cluster.services.ldap)[0] if cluster.services.ldap else None,
        "url": influx_url(cluster),
    }
    files["files/etc/hal-provision/monitoring.json"] = json.dumps(facts, indent=2, sort_keys=True) + "\n"
    return files
