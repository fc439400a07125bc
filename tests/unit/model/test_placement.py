"""Placements that name node groups (@GROUP) and roles (@role:ROLE): resolving, scaling out,
and the errors of a wrong name (one per place it is written, with the nearest name).

The cases edit tests/data/clusters/x86-twogen.yml: with every placement written as a
reference it renders byte for byte what the plain description renders, and growing a node
group by its `hosts` and `count` (and cabling) alone gives the new nodes everything the
group's nodes have.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from hal_provision.findings import Level
from hal_provision.model import Cluster, Partition
from hal_provision.model.placement import NodeGroups
from hal_provision.render import render_all
from hal_provision.loader import validate_text

TWOGEN = Path(__file__).resolve().parent.parent.parent / "data" / "clusters" / "x86-twogen.yml"

# Every placement of x86-twogen, written as references (old text -> new text).
AS_REFERENCES = [
    ("  slurmctld: tg-mgmt\n", '  slurmctld: "@mgmt"\n'),
    ("  slurmdbd: tg-mgmt\n", '  slurmdbd: "@role:management"\n'),
    ("  accounting_db: tg-mgmt\n", '  accounting_db: "@mgmt"\n'),
    ("  monitoring_db: tg-mgmt\n", '  monitoring_db: "@mgmt"\n'),
    ("  portal: tg-login\n", '  portal: "@login"\n'),
    ("  ldap: tg-mgmt\n", '  ldap: "@mgmt"\n'),
    ("      nodes: tg[01-08]\n", '      nodes: "@role:compute"\n'),
    ("      nodes: tg[05-08]\n", '      nodes: "@h100"\n'),
    ("{host: tg-nfs, volumes", '{host: "@nfs", volumes'),
    ("        server: tg-nfs\n        path: /export/home\n", '        server: "@nfs"\n        path: /export/home\n'),
    ("        server: tg-nfs\n        path: /export/sw\n", '        server: "@nfs"\n        path: /export/sw\n'),
    ('        clients: "tg[01-08],tg-login"\n', '        clients: "@role:compute,@login"\n'),
    ('mount_point: /home, clients: "tg[01-08],tg-login"}', 'mount_point: /home, clients: "@login,@role:compute"}'),
    ('mount_point: /sw, clients: "tg[01-08],tg-login",', 'mount_point: /sw, clients: "@a100,@h100,@login",'),
    ("grafana: {host: tg-mgmt,", 'grafana: {host: "@mgmt",'),
]

# tg[09-12] join the H100 group: its hosts and count, and their cables (validate demands them).
SCALE_OUT = [
    ("    hosts: tg[05-08]\n    count: 4\n", "    hosts: tg[05-12]\n    count: 8\n"),
    ('{hosts: "tg[05-08]", port: 1, switch: ib-leaf2', '{hosts: "tg[05-12]", port: 1, switch: ib-leaf2'),
]


def edit(text: str, *replacements: tuple[str, str]) -> str:
    for old, new in replacements:
        assert text.count(old) == 1, f"{old!r} is not once in the text"
        text = text.replace(old, new)
    return text


def line_of(text: str, piece: str) -> int:
    """The 1-based line of the first line of `text` that holds `piece`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if piece in line)


def checked(text: str):
    loaded = validate_text(text, "cluster.yml")
    return loaded, [f for f in loaded.findings if f.level is not Level.info]


@pytest.fixture(scope="module")
def twogen_text() -> str:
    """x86-twogen.yml's text, which these tests edit (conftest's `twogen` is its model)."""
    return TWOGEN.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def referenced(twogen_text) -> str:
    return edit(twogen_text, *AS_REFERENCES)


def test_references_render_what_the_hostlists_render(twogen_text, referenced):
    plain, plain_findings = checked(twogen_text)
    refs, ref_findings = checked(referenced)
    assert ref_findings == plain_findings == []
    assert render_all(refs.model) == render_all(plain.model)
    # People still read what they wrote.
    # (the first expression written for a hostlist: the home export's clients)
    assert refs.model.written(refs.model.storage.nfs.mounts[0].clients) == "@role:compute,@login"
    assert refs.model.written("tg-mgmt") == "@mgmt"
    assert plain.model.written("tg-mgmt") == "tg-mgmt"


@pytest.fixture(scope="module")
def scaled(referenced):
    loaded, findings = checked(edit(referenced, *SCALE_OUT))
    assert findings == [], "\n".join(f.format() for f in findings)
    return render_all(loaded.model)


def test_scale_out_mounts_and_exports(scaled):
    storage = yaml.safe_load(scaled["inventory/storage.yml"])["all"]["children"]
    for mount in ("nfs_mount_home", "nfs_mount_sw"):
        assert "tg12" in storage[mount]["hosts"], mount
    assert "    tg12(rw,sync,no_subtree_check,root_squash)" in scaled["files/nfs/tg-nfs/exports"]


def test_scale_out_partitions(scaled):
    conf = scaled["files/etc/slurm/slurm.conf"]
    assert "PartitionName=gpu Nodes=tg[01-12] " in conf
    assert "PartitionName=h100 Nodes=tg[05-12] " in conf
    assert "NodeName=tg[05-12] " in conf


def test_scale_out_health_expectations(scaled):
    expected = json.loads(scaled["files/etc/hal-provision/health/h100.json"])
    assert expected["hosts"] == "tg[05-12]"
    assert expected["checks"]["mounts"]["mount_points"] == ["/home", "/sw", "/local"]  # shared, then local scratch
    assert "{tg[05-12]} || check_fs_mount_rw -f /home\n" in scaled["files/etc/nhc/nhc.conf"]


def test_scale_out_telegraf_inputs(scaled):
    """A node's Telegraf configuration is its group's role's (roles/telegraf: hal_role)."""
    groups = yaml.safe_load(scaled["inventory/hosts.yml"])["all"]["children"]
    assert "tg12" in groups["nodes_h100"]["hosts"]
    assert groups["nodes_h100"]["vars"]["hal_role"] == "compute"
    assert "nodes_h100" in groups["role_compute"]["children"]
    assert "[[inputs.nvidia_smi]]" in scaled["files/etc/telegraf/roles/compute.conf"]


def test_scale_out_with_hostlists_warns_of_the_missing_homes(twogen_text):
    """The issue's failure: plain hostlists do not grow. The partitions already had their error;
    the missing homes now have a warning."""
    _loaded, findings = checked(edit(twogen_text, *SCALE_OUT))
    assert [(f.level, f.dotted, f.line) for f in findings] == [
        (Level.error, "nodes[4].hosts", line_of(twogen_text, "    hosts: tg[05-08]")),
        (Level.warning, "storage.nfs.mounts[0].clients", line_of(twogen_text, "- {export: home, mount_point: /home")),
    ]
    assert "no Slurm partition includes compute nodes tg[09-12]" in findings[0].message
    assert findings[1].message.startswith(
        "tg[09-12] (4 hosts) of node group 'h100' (compute) mount no file system at /home (the default home path)"
    )


def test_unknown_group_is_one_located_error_with_the_nearest_name(referenced):
    loaded, findings = checked(edit(referenced, ('"@login,@role:compute"}', '"@logn,@role:compute"}')))
    assert loaded.model is None
    assert [(f.dotted, f.line, f.column) for f in findings] == [
        ("storage.nfs.mounts[0].clients", line_of(referenced, "- {export: home, mount_point: /home"), 44)
    ]
    assert findings[0].message.startswith("unknown node group '@logn'; did you mean '@login'?")


def test_unknown_role_names_the_roles(referenced):
    text = edit(referenced, ('"@role:compute"\n', '"@role:gpu"\n'))
    _loaded, findings = checked(text)
    assert [(f.dotted, f.line) for f in findings] == [("slurm.partitions[0].nodes", line_of(text, '"@role:gpu"'))]
    assert "unknown role in '@role:gpu'; did you mean" in findings[0].message


def test_role_without_groups_is_an_error(referenced):
    _loaded, findings = checked(edit(referenced, ('  portal: "@login"\n', '  portal: "@role:development"\n')))
    assert [(f.dotted, f.message) for f in findings] == [
        ("services.portal", "'@role:development' names no host: no node group plays role 'development'")
    ]


def test_reference_to_a_broken_group_adds_no_error(referenced):
    """The group's own hostlist is the mistake; the places naming it say nothing more."""
    _loaded, findings = checked(edit(referenced, ("    hosts: tg-login\n", "    hosts: tg-login]\n")))
    assert [f.dotted for f in findings] == ["nodes[1].hosts"]


# One misspelt host, written in one place: exactly one error there, naming the host meant.
MISSPELT = [
    ("slurmctld", "  slurmctld: tg-mgmt\n", "  slurmctld: tg-mgnt\n", "services.slurmctld"),
    ("grafana", "grafana: {host: tg-mgmt,", "grafana: {host: tg-mgnt,", "monitoring.grafana.host"),
    ("portal", "  portal: tg-login\n", "  portal: tg-logn\n", "services.portal"),
    ("partition", "      nodes: tg[05-08]\n", '      nodes: "tg[05-08],tg-logn"\n', "slurm.partitions[1].nodes"),
    ("nfs-server", "{host: tg-nfs, volumes", "{host: tg-nsf, volumes", "storage.nfs.servers[0].host"),
    (
        "export-server",
        "        server: tg-nfs\n        path: /export/home\n",
        "        server: tg-nsf\n        path: /export/home\n",
        "storage.nfs.exports[0].server",
    ),
    (
        "export-clients",
        '        clients: "tg[01-08],tg-login"\n',
        '        clients: "tg[01-08],tg-logn"\n',
        "storage.nfs.exports[0].clients",
    ),
    (
        "home-mount",
        'mount_point: /home, clients: "tg[01-08],tg-login"}',
        'mount_point: /home, clients: "tg[01-08],tg-logn"}',
        "storage.nfs.mounts[0].clients",
    ),
]


@pytest.mark.parametrize(("old", "new", "path"), [pytest.param(*m[1:], id=m[0]) for m in MISSPELT])
def test_one_wrong_name_is_one_error(twogen_text, old, new, path):
    _loaded, findings = checked(edit(twogen_text, (old, new)))
    errors = [f for f in findings if f.level is Level.error]
    assert [f.dotted for f in errors] == [path], "\n".join(f.format() for f in findings)
    assert errors[0].message.endswith(("did you mean 'tg-mgmt'?", "did you mean 'tg-login'?", "did you mean 'tg-nfs'?"))
    assert findings == errors  # nor a derived warning


def test_node_groups_resolve_roles_with_also():
    groups = NodeGroups.of(
        {
            "nodes": [
                {"name": "ws", "role": "compute", "also": ["login", "management"], "hosts": "ws01"},
                {"name": "gpu", "role": "compute", "hosts": "gpu[01-16]"},
                {"name": "dev", "role": "development", "hosts": "dev1"},
            ]
        }
    )
    assert groups.resolve("@role:login") == "ws01"
    assert groups.resolve("@role:compute,dev1") == "dev1,gpu[01-16],ws01"
    assert groups.resolve("@gpu,gpu[17-20]") == "gpu[01-20]"
    assert groups.resolve("gpu[01-04]") == "gpu[01-04]"  # a plain hostlist stays as written
    assert groups.written == {
        "ws01": "@role:login",
        "dev1,gpu[01-16],ws01": "@role:compute,dev1",
        "gpu[01-20]": "@gpu,gpu[17-20]",
    }


def test_references_need_a_whole_description():
    with pytest.raises(ValidationError, match="resolve only within a whole cluster description"):
        Partition(name="gpu", nodes="@compute")
    assert Partition(name="gpu", nodes="gpu[1-4]").nodes == "gpu[1-4]"


def test_a_dumped_model_validates_again(referenced):
    """Dumps hold the resolved hostlists (the sandbox re-reads its derived model so)."""
    model = checked(referenced)[0].model
    again = Cluster.model_validate_json(model.model_dump_json())
    assert again.storage.nfs.mounts[0].clients == "tg[01-08],tg-login"


def test_a_host_beyond_a_range_gets_no_suggestion(twogen_text):
    """tg09 beside tg[01-08] is a range's end, not a misspelling of tg08."""
    _loaded, findings = checked(edit(twogen_text, ("      nodes: tg[01-08]\n", "      nodes: tg[01-09]\n")))
    assert [f.message for f in findings] == ["partition 'gpu' names tg09, not in any node group"]


def test_the_nfs_server_of_the_home_holds_it_the_others_are_warned(twogen_text):
    """A server exporting /home itself (export path = mount point) has the homes; a login node
    that is neither a client nor that server has none."""
    text = edit(
        twogen_text,
        ("volumes: [/export], threads: 16}", "volumes: [/export, /home], threads: 16}"),
        ("        path: /export/home\n", "        path: /home\n"),
        ('clients: "tg[01-08],tg-login"}\n      - {export: sw', 'clients: "tg[01-08]"}\n      - {export: sw'),
    )
    model = checked(text)[0].model
    assert model is not None
    assert "tg-nfs" in model.hosts_mounting("/home") and "tg-login" not in model.hosts_mounting("/home")
    warned = [
        f
        for f in checked(text)[1]
        if "mount no file system at /home" in f.message or "mounts no file system at /home" in f.message
    ]
    assert [f.message.split(" of node group")[0] for f in warned] == ["tg-login"]
