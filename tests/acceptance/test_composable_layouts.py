"""Composable GPUs: every layout's rendered slurm.conf and gres.conf (files/etc/hal-provision/
layouts/<layout>/etc/slurm/), not only the active one's, are loaded by the real slurmctld, and
slurmd -G on a composed host lists the pool GPUs that layout gives it ("real
slurmctld/slurmd -G accept each")."""

from __future__ import annotations

import re

import pytest

from hal_provision.render.composable import LAYOUTS

from . import expected
from .conftest import load_cluster
from .slurm_harness import SLURM_DIR, records, run_slurmd

pytestmark = pytest.mark.acceptance

CASE = "x86-composable"
LAYOUT_NAMES = [layout.name for layout in load_cluster(CASE).composable.layouts]


def use_layout(name: str):
    """A Scratch edit: the layout's slurm.conf (with the harness's rewrites) and gres.conf in
    place of the main tree's."""

    def edit(scratch) -> None:
        for conf in ("slurm.conf", "gres.conf"):
            text = scratch.rendered[f"{LAYOUTS}/{name}/etc/slurm/{conf}"]
            scratch.rendered[f"{SLURM_DIR}/{conf}"] = text
            (scratch.conf_dir / conf).write_text(text, encoding="utf-8")
        scratch.install_harness_configs()

    return edit


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
def test_slurmctld_and_slurmd_accept_every_layout(layout, slurm, extra_controller):
    base = load_cluster(CASE, slurm.major)
    counts = base.composable.counts(base.composable.layout(layout))
    assert sorted(set(counts.values())) != [0], counts  # the layout composes something
    controller = extra_controller(base, use_layout(layout))
    assert (controller.scratch.conf_dir / "gres.conf").read_text() == controller.scratch.rendered[
        f"{LAYOUTS}/{layout}/etc/slurm/gres.conf"
    ]
    nodes = records(controller.scontrol("-o", "show", "node"), "NodeName")
    view = base.with_layout(layout)  # what the model says that layout is, not the rendered text
    want = expected.compute_nodes(view)
    for host, n in counts.items():
        assert nodes[host]["Gres"] == (f"gpu:v100:{n}" if n else "(null)") == want[host].gres, host
        assert "pool_chassis1" in nodes[host]["AvailableFeatures"].split(","), host
    for host, n in counts.items():
        profile = want[host].profile
        devices = [expected.gpu_file(profile, i) for i in range(profile.gpu_count)]
        result = run_slurmd(controller.scratch, profile, devices, "-G", "-N", host)
        assert result.returncode == 0, result.stderr
        assert not re.search(r"error|fatal", result.stderr, re.IGNORECASE), result.stderr
        gres = records("\n".join(line for line in result.stderr.splitlines() if " Gres Name=" in line), "Index")
        assert sorted(gres, key=int) == [str(i) for i in range(n)], (host, result.stderr)
        for i, got in gres.items():
            assert (got["Type"], got["File"]) == ("v100", f"/dev/nvidia{i}"), (host, got)
            assert got["Cores"] == expected.gpu_cores(profile, int(i)) == "20-39", (host, got)  # the pool's socket 1
