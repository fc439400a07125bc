"""Daemons run where the model places them, and munge authenticates across the cluster."""

from __future__ import annotations

import pytest

from deployed import MUNGE_GROUPS, deployed

D = deployed()

# systemd unit -> the inventory groups whose hosts run it (Debian unit names).
PLACEMENT: dict[str, tuple[str, ...]] = {
    "munge": MUNGE_GROUPS,
    "slurmctld": ("service_slurmctld",),
    "slurmdbd": ("service_slurmdbd",),
    "mariadb": ("service_accounting_db",),
    "slurmd": ("slurm_nodes",),
    "ssh": ("slurm_nodes",),  # pam_slurm_adopt guards ssh on the computes
}
HOST_UNITS = [
    pytest.param(h, unit, id=f"{h}:{unit}") for unit, groups in PLACEMENT.items() for h in D.hosts_in(*groups)
]


@pytest.mark.parametrize(("host", "unit"), HOST_UNITS)
def test_service_running_and_enabled(host, unit):
    svc = D.host(host).service(unit)
    running, enabled = svc.is_running, svc.is_enabled
    assert running and enabled, (
        f"{host}: {unit} is {'running' if running else 'NOT running'} and "
        f"{'enabled' if enabled else 'NOT enabled'}\n{D.journal(host, unit)}"
    )


@pytest.mark.parametrize("host", D.hosts_in(*MUNGE_GROUPS))
def test_munge_credential_from_login_decodes(host):
    # A fresh credential per decoding host: munged refuses to decode one twice (replay).
    cred = D.host(D.login).check_output("munge -n")
    out = D.host(host).run("echo %s | unmunge", cred)
    assert out.rc == 0 and "STATUS:          Success (0)" in out.stdout, (
        f"a credential made on {D.login} does not decode on {host}:\n{out.stdout}{out.stderr}\n"
        f"{D.journal(host, 'munge', 20)}"
    )
