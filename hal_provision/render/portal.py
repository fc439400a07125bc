"""The web portal's catalogue, the job-side launch scripts both front ends run, and JupyterHub.

- ``files/etc/hal-provision/portal.json``: the catalogue resolved against the model: for every
  app, what it runs, the modules or container it starts in, and for every virtual partition it
  offers the exact Slurm options `swbatch -p <virtual partition>` would give (the same
  resolver), without --time: the session's hours come from the form, capped at the app's limit.
  The portal roles read it; it is not a node configuration file.
- ``files/<portal.prefix>/apps/<app>/launch.sh`` (default prefix <cluster.prefix>/portal): the job side of an app,
  on compute nodes: load its modules (or enter its container), then run the command the front
  end gives (JupyterHub: batchspawner-singleuser jupyterhub-singleuser; Open OnDemand: jupyter).
- ``files/etc/hal-provision/portal/jupyter_server_config.py``: the session environment's
  jupyter-server-proxy entries (TensorBoard, H2O), installed into the environment module's
  prefix (etc/jupyter), where every session's Jupyter server reads it.
- ``files/etc/jupyterhub/jupyterhub_config.py``: the hub: TLS, LDAP login against the
  directory, the catalogue spawner (batchspawner's SlurmSpawner), idle culling.

No secret is rendered: the hub's cookie secret and the proxy token are generated on the
portal node; TLS keys come from the cluster CA or the site.
"""

from __future__ import annotations

import json
import pprint
import shlex

from ..hostlist import nodeset
from ..model import Cluster
from ..model.accounts import base_dn
from ..model.portal import Portal, PortalApp
from ..node.swsuite.translate import Request, SwError, resolve
from . import swsuite
from .accounts import CA_CERT
from .common import header, json_comment

CATALOGUE = "files/etc/hal-provision/portal.json"
SERVER_PROXY = "files/etc/hal-provision/portal/jupyter_server_config.py"
HUB_CONFIG = "files/etc/jupyterhub/jupyterhub_config.py"
# The certificate the portal role has the cluster CA sign when the site brings none.
CA_SIGNED_CERT = "/etc/jupyterhub/tls/portal.crt"
CA_SIGNED_KEY = "/etc/jupyterhub/tls/portal.key"
# The hub's state: the cookie secret it generates at its first start, and its database.
HUB_STATE_DIR = "/var/lib/jupyterhub"
COOKIE_SECRET = f"{HUB_STATE_DIR}/jupyterhub_cookie_secret"

# Where each kind of app opens, relative to the session's base URL.
DEFAULT_URL = {
    "jupyter_notebook": "/tree",
    "jupyterlab": "/lab",
    "tensorboard": "/tensorboard/",
    "h2o": "/h2o/flow/index.html",
}


def launch_path(p: Portal, app: PortalApp) -> str:
    return f"{p.prefix.rstrip('/')}/apps/{app.name}/launch.sh"


def server_name(cluster: Cluster) -> str:
    p = cluster.portal
    if p.server_name:
        return p.server_name
    return f"{nodeset(cluster.services.portal)[0]}.{cluster.cluster.domain}"


def session_options(cluster: Cluster, vp_name: str, table: dict | None = None) -> list[str]:
    """Slurm options of a one-server session on `vp_name`: the wrapper suite's, one task
    holding all of the job's CPUs (the Jupyter server), without --time. `table`: the wrapper
    suite's table (render.swsuite.table), when the caller already has it."""
    try:
        args = resolve(table if table is not None else swsuite.table(cluster), Request(vp_name), one_task_per_node=True)
    except SwError:  # checks report it; render what can be rendered
        return []
    return [a for a in args if not a.startswith("--time=")]


def catalogue(cluster: Cluster) -> dict:
    """The catalogue both front ends render from (JSON-ready). A virtual partition the active
    composable layout hides (Cluster.hidden_virtual_partitions) is left out of the apps that
    offer it, an app left with none is left out, each named under "_hidden" with why."""
    p = cluster.portal
    vps = {vp.name: vp for vp in cluster.swsuite.virtual_partitions} if cluster.swsuite else {}
    table = swsuite.table(cluster)
    layout_hidden = cluster.hidden_virtual_partitions
    apps, hidden = [], []
    for app in p.apps:
        offered = {}
        for name in app.virtual_partitions:
            vp = vps.get(name)
            if vp is None:
                continue
            if name in layout_hidden:
                hidden.append(f"{app.name} {layout_hidden[name]}")
                continue
            hours = min(h for h in (app.max_hours, vp.max_time_hours) if h is not None)
            offered[name] = {
                "description": vp.description or _describe(vp),
                "gpus": vp.gpus or 0,
                "max_hours": hours,
                "options": session_options(cluster, name, table),
            }
        if not offered and any(name in layout_hidden for name in app.virtual_partitions):
            hidden.append(f"{app.name}: every virtual partition it offers is hidden")
            continue
        apps.append(
            {
                "name": app.name,
                "kind": app.kind,
                "title": app.title,
                "description": app.description,
                "modules": list(app.modules),
                "container": app.container,
                "launch": launch_path(p, app),
                "default_url": DEFAULT_URL[app.kind],
                "default_hours": app.default_hours,
                "virtual_partitions": offered,
            }
        )
    env_prefix = _module_prefix(cluster, p.user_environment.module)
    return {
        "front_end": p.front_end,
        "server_name": server_name(cluster),
        "port": p.port,
        "start_timeout_seconds": p.start_timeout_seconds,
        "idle_cull_minutes": p.idle_cull_minutes,
        "sessions_per_user": p.sessions_per_user,
        "prefix": p.prefix,
        "tls": {
            "site": p.tls.certificate is not None,
            "certificate": p.tls.certificate or CA_SIGNED_CERT,
            "key": p.tls.key or CA_SIGNED_KEY,
        },
        "user_environment": {
            "module": p.user_environment.module,
            "prefix": env_prefix,
            "python": p.user_environment.python,
            "packages": [
                f"jupyterhub=={p.jupyterhub_version}",
                f"batchspawner=={p.batchspawner_version}",
                *p.user_environment.packages,
            ],
        },
        "apps": apps,
        **({"_hidden": hidden} if hidden else {}),
    }


def _describe(vp) -> str:
    if vp.kind == "shard":
        return f"{vp.shards} shard{'s' if vp.shards > 1 else ''} of a GPU that other jobs share"
    if vp.kind == "gpu":
        return f"{vp.gpus} GPU{'s with their' if vp.gpus > 1 else ' with its'} share of a node"
    return f"{vp.nodes} whole node{'s' if vp.nodes > 1 else ''}, no GPU"


def _module_prefix(cluster: Cluster, ref: str) -> str | None:
    found = cluster.software.resolve(ref) if cluster.software and "/" in ref else []
    return cluster.software.prefix_of(found[0]) if found else None


def render(cluster: Cluster) -> dict[str, str]:
    if cluster.portal is None or cluster.services.portal is None:
        return {}
    cat = catalogue(cluster)
    files = {CATALOGUE: json.dumps({"_comment": json_comment(cluster), **cat}, indent=2, sort_keys=True) + "\n"}
    for app in cluster.portal.apps:
        files["files" + launch_path(cluster.portal, app)] = launch_script(cluster, app)
    files[SERVER_PROXY] = server_proxy_config(cluster)
    files[HUB_CONFIG] = hub_config(cluster, cat)
    return files


# ---- the job side -----------------------------------------------------------------------------


def launch_script(cluster: Cluster, app: PortalApp) -> str:
    lines = [
        "#!/bin/bash\n",
        header(cluster),
        f"# Portal app {app.name!r} ({app.title}).\n",
        "# Job side: runs in the session's Slurm job on a compute node and execs the command its\n",
        "# front end gives (JupyterHub: batchspawner-singleuser jupyterhub-singleuser ...; Open\n",
        "# OnDemand: jupyter ...) in the app's environment.\n",
        "set -euo pipefail\n",
        '[ "$#" -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }\n',
        "# Lmod for a non-login shell; a clean environment, then the app's modules (Lmod's own\n",
        "# scripts are not written for `set -u`).\n",
        "set +u\n",
        "if ! type module >/dev/null 2>&1; then source /etc/profile.d/lmod.sh; fi\n",
        "module purge\n",
    ]
    for ref in app.modules:
        lines.append(f"module load {shlex.quote(ref)}\n")
    lines.append("set -u\n")
    if app.kind == "tensorboard":
        lines += [
            f"# TensorBoard (through jupyter-server-proxy at /tensorboard/) reads {app.tensorboard_logdir}.\n",
            f"export HAL_TENSORBOARD_LOGDIR={_home_path(app.tensorboard_logdir)}\n",
            'mkdir -p "$HAL_TENSORBOARD_LOGDIR"\n',
        ]
    lines += [
        'echo "hal-portal: app ' + app.name + " on $(hostname) (job ${SLURM_JOB_ID:-none}), "
        'GPUs ${CUDA_VISIBLE_DEVICES:-none}" >&2\n',
    ]
    if app.container is not None:
        runtime = cluster.containers.runtime if cluster.containers else "apptainer"
        lines += [
            "# The app's own image; GPUs (--nv) when the job has any.\n",
            'nv=(); [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && nv=(--nv)\n',
            f'exec {runtime} exec "${{nv[@]}}" {shlex.quote(app.container)} "$@"\n',
        ]
    else:
        lines.append('exec "$@"\n')
    return "".join(lines)


def _home_path(path: str) -> str:
    """A shell word for a path that may start with ~ (the session user's home)."""
    if path == "~" or path.startswith("~/"):
        return '"$HOME"' + shlex.quote(path[1:]) if len(path) > 1 else '"$HOME"'
    return shlex.quote(path)


def server_proxy_config(cluster: Cluster) -> str:
    """jupyter-server-proxy entries of the session environment: TensorBoard and H2O Flow."""
    return (
        header(cluster)
        + """\
# The portal's session environment (installed into the environment module's etc/jupyter):
# TensorBoard and H2O Flow behind the session's own authenticated URL, started on first use.
import os
from importlib.util import find_spec

c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)

_spec = find_spec("h2o")
_h2o_jar = os.path.join(_spec.submodule_search_locations[0], "backend", "bin", "h2o.jar") if _spec else "h2o.jar"

c.ServerProxy.servers = {
    "tensorboard": {
        "command": ["tensorboard", "--logdir",
                    os.environ.get("HAL_TENSORBOARD_LOGDIR", os.path.expanduser("~/tensorboard")),
                    "--host", "127.0.0.1", "--port", "{port}", "--path_prefix", "{base_url}tensorboard"],
        "absolute_url": True,
        "timeout": 120,
        "launcher_entry": {"title": "TensorBoard"},
    },
    "h2o": {
        "command": ["java", "-Xmx4g", "-jar", _h2o_jar, "-ip", "127.0.0.1", "-port", "{port}",
                    "-context_path", "{base_url}h2o", "-name", "hal-portal-{port}"],
        "absolute_url": True,
        "timeout": 180,
        "launcher_entry": {"title": "H2O Flow"},
    },
}
"""
    )


# ---- JupyterHub ---------------------------------------------------------------------------------


def hub_config(cluster: Cluster, cat: dict) -> str:
    p = cluster.portal
    a = cluster.accounts
    ldap_host = f"{nodeset(cluster.services.ldap)[0]}.{cluster.cluster.domain}" if cluster.services.ldap else ""
    base = base_dn(a, cluster.cluster.domain) if a is not None else ""
    cert = p.tls.certificate or CA_SIGNED_CERT
    key = p.tls.key or CA_SIGNED_KEY
    prefix = p.prefix.rstrip("/")
    hub_apps = {
        app["name"]: {
            k: app[k]
            for k in ("title", "description", "kind", "launch", "default_url", "default_hours", "virtual_partitions")
        }
        for app in cat["apps"]
    }
    for app in hub_apps.values():
        app["virtual_partitions"] = {
            name: {k: vp[k] for k in ("description", "max_hours", "options")}
            for name, vp in app["virtual_partitions"].items()
        }
    apps_literal = pprint.pformat(hub_apps, indent=1, width=110, sort_dicts=False)
    port = a.directory.port if a is not None else 636
    return (
        header(cluster)
        + f'''\
# JupyterHub on {cat["server_name"]}: log in with the directory password, start an app of the
# catalogue as a Slurm job (batchspawner) on a compute node, as the user.
# Secrets are not here: the cookie secret is generated on this node, the proxy token comes from
# the environment (CONFIGPROXY_AUTH_TOKEN, from a root-only file the role generates).
c = get_config()  # noqa: F821  (defined by JupyterHub when it loads this file)

c.JupyterHub.bind_url = "https://:{p.port}/"
c.JupyterHub.ssl_cert = "{cert}"
c.JupyterHub.ssl_key = "{key}"
c.JupyterHub.hub_ip = "0.0.0.0"  # sessions on compute nodes call the hub's API back
c.JupyterHub.hub_connect_ip = "{nodeset(cluster.services.portal)[0]}"
c.JupyterHub.cookie_secret_file = "{COOKIE_SECRET}"
c.JupyterHub.db_url = "sqlite:///{HUB_STATE_DIR}/jupyterhub.sqlite"
c.JupyterHub.data_files_path = "{prefix}/hub/share/jupyterhub"
c.JupyterHub.allow_named_servers = {p.sessions_per_user > 1}
c.JupyterHub.named_server_limit_per_user = {p.sessions_per_user}

# Log in against the cluster directory (LDAPS, trusting the cluster CA).
c.JupyterHub.authenticator_class = "ldapauthenticator.LDAPAuthenticator"
c.LDAPAuthenticator.server_address = "{ldap_host}"
c.LDAPAuthenticator.server_port = {port}
c.LDAPAuthenticator.tls_strategy = "on_connect"
c.LDAPAuthenticator.tls_kwargs = {{"ca_certs_file": "{CA_CERT}", "validate": 2}}  # ssl.CERT_REQUIRED
c.LDAPAuthenticator.bind_dn_template = ["uid={{username}},ou=People,{base}"]
c.LDAPAuthenticator.user_search_base = "ou=People,{base}"
c.LDAPAuthenticator.user_attribute = "uid"
c.LDAPAuthenticator.lookup_dn = False
c.LDAPAuthenticator.escape_userdn = True
c.LDAPAuthenticator.valid_username_regex = r"^[a-z_][a-z0-9_-]*$"
# Everyone the directory lets bind may use the portal; Slurm's associations decide what runs.
c.Authenticator.allow_all = True

# Sessions: batchspawner's SlurmSpawner with the catalogue's form (hal_portal.CatalogueSpawner).
c.JupyterHub.spawner_class = "hal_portal.CatalogueSpawner"
c.CatalogueSpawner.apps = {apps_literal}
c.Spawner.start_timeout = {p.start_timeout_seconds}
c.Spawner.http_timeout = 120
c.Spawner.env_keep = ["PATH", "LANG", "LC_ALL"]
c.SlurmSpawner.exec_prefix = "sudo -u {{username}}"
c.BatchSpawnerBase.req_srun = "srun --export=ALL"

# Idle sessions end after {p.idle_cull_minutes} minutes (their Slurm job with them).
c.JupyterHub.load_roles = [
    {{"name": "idle-culler", "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}},
]
c.JupyterHub.services = [
    {{
        "name": "idle-culler",
        "command": ["{prefix}/hub/bin/python3", "-m", "jupyterhub_idle_culler", "--timeout={p.idle_cull_minutes * 60}"],
    }},
]
for role in c.JupyterHub.load_roles:
    if role["name"] == "idle-culler":
        role["services"] = ["idle-culler"]
'''
    )
