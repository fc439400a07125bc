"""The portal's hub side against the real thing: a real JupyterHub loads the rendered
jupyterhub_config.py and resolves its spawner (the hal_portal module, installed as the portal
role installs it) and its LDAP authenticator, with the model's values.

Not here: `sbatch --test-only` of the sessions' batch scripts cannot place a job on this
harness's slurmctld (its nodes have no slurmd, so they never respond); the session options are
the wrapper suite's own (`swrun -p gpux1` runs them in the sandbox), and a session's job, the
hub serving pages and an LDAP login run in the sandbox."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from hal_provision.render import portal, render_all

from .conftest import load_cluster

pytestmark = pytest.mark.acceptance

SPAWNER = Path(__file__).resolve().parents[2] / "hal_provision" / "node" / "portal" / "spawner.py"


@pytest.fixture(scope="module")
def hal_portal(tmp_path_factory):
    """The spawner as the role installs it: spawner.py copied to a module named hal_portal."""
    site = tmp_path_factory.mktemp("hub-site")
    shutil.copy(SPAWNER, site / "hal_portal.py")
    sys.path.insert(0, str(site))
    try:
        import hal_portal

        yield hal_portal
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("hal_portal", None)


def test_real_jupyterhub_loads_the_rendered_config(hal_portal, tmp_path):
    """No Slurm daemon involved: HAL's description alone (not the `hal` fixture, whose controller
    would be started, once per Slurm major, for nothing)."""
    from jupyterhub.app import JupyterHub

    cluster = load_cluster("hal")

    config_file = tmp_path / "jupyterhub_config.py"
    config_file.write_text(render_all(cluster)[portal.HUB_CONFIG])
    app = JupyterHub()
    app.load_config_file(str(config_file))
    assert app.spawner_class is hal_portal.CatalogueSpawner
    assert app.bind_url == "https://:443/" and app.hub_connect_ip == "hal-mgmt2"
    assert [s["name"] for s in app.services] == ["idle-culler"]
    authenticator = app.authenticator_class(parent=app)
    assert type(authenticator).__name__ == "LDAPAuthenticator"
    assert (authenticator.server_address, authenticator.server_port) == ("hal-mgmt1.ncsa.illinois.edu", 636)
    assert authenticator.tls_strategy.name == "on_connect"
    assert authenticator.tls_kwargs["ca_certs_file"] == "/etc/ssl/hal-provision/cluster-ca.crt"
    assert authenticator.valid_username_regex == r"^[a-z_][a-z0-9_-]*$"
    spawner = app.spawner_class(config=app.config)
    assert spawner.start_timeout == 300 and spawner.exec_prefix == "sudo -u {username}"
    assert list(spawner.apps) == [a.name for a in cluster.portal.apps]
