"""Open OnDemand: the portal's front end where a site runs it, rendered from the catalogue
JupyterHub's spawner uses (render.portal.catalogue), whatever portal.front_end says.

- ``files/etc/ood/config/ood_portal.yml``: the ood-portal-generator's input: the portal's name,
  port and certificate, HTTP Basic login against the cluster directory (Apache
  mod_authnz_ldap, LDAPS; the directory's uid is the system user), and the /node proxy to
  sessions, allowed to compute nodes only.
- ``files/etc/ood/config/clusters.d/<cluster>.yml``: the cluster as OnDemand submits to it
  (Slurm's client commands and slurm.conf).
- ``files/var/www/ood/apps/sys/<app>/``: one batch_connect app per catalogue entry:
  ``manifest.yml``, ``form.yml`` (the app's virtual partitions and hours),
  ``submit.yml.erb`` (the exact Slurm options `swbatch -p <virtual partition>` gives, and the
  hours, refused past the partition's limit), ``template/before.sh.erb`` (port, password,
  Jupyter server config), ``template/script.sh.erb`` (the app's launch script, the one
  JupyterHub's sessions run, then Jupyter), ``template/after.sh.erb`` (wait for the server)
  and ``view.html.erb`` (the Connect button).

Nothing here holds a secret: each session's password is made in its job; TLS keys come from
the cluster CA or the site. The apps' template/script.sh.erb must be installed executable.
"""

from __future__ import annotations

import html
import json
import re
import shlex

import yaml

from ..hostlist import fold_hostlists, nodeset
from ..model import Cluster, Role
from ..model.accounts import base_dn
from . import slurm
from .accounts import CA_CERT
from .common import header
from .portal import CA_SIGNED_CERT, CA_SIGNED_KEY, catalogue

OOD_CONFIG = "files/etc/ood/config"
PORTAL_CONFIG = f"{OOD_CONFIG}/ood_portal.yml"
OOD_APPS = "files/var/www/ood/apps/sys"
SLURM_BIN = "/usr/bin"  # Debian's slurm-client
SLURM_CONF = slurm.ETC.removeprefix("files") + "/slurm.conf"
NODE_URI = "/node"  # sessions' own web servers, proxied with their full path (Jupyter's base_url)
SESSION_CONFIG = "jupyter_server_config.py"  # written by before.sh in the session's directory
JUPYTER_COMMAND = {  # tensorboard and h2o open behind jupyter-server-proxy in a JupyterLab session
    "jupyter_notebook": "jupyter notebook",
    "jupyterlab": "jupyter lab",
    "tensorboard": "jupyter lab",
    "h2o": "jupyter lab",
}


def render(cluster: Cluster) -> dict[str, str]:
    if cluster.portal is None or cluster.services.portal is None:
        return {}
    cat = catalogue(cluster)
    files = {PORTAL_CONFIG: portal_config(cluster, cat), cluster_file_path(cluster): cluster_file(cluster)}
    for app in cat["apps"]:
        files.update(app_files(cluster, cat, app))
    return dict(sorted(files.items()))


def cluster_file_path(cluster: Cluster) -> str:
    return f"{OOD_CONFIG}/clusters.d/{cluster.cluster.name}.yml"


def app_dir(app: dict) -> str:
    return f"{OOD_APPS}/{app['name']}"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (script wrappers) as literal blocks, as a person would write them."""


def _str(dumper: yaml.SafeDumper, text: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _str)


def _yaml(cluster: Cluster, data: dict, intro: str = "") -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=110)
    return header(cluster) + intro + "---\n" + body


def _shell_words(text: str) -> str:
    """text inside a shell double-quoted string."""
    return re.sub(r'([\\"$`])', r"\\\1", text)


def _comment(text: str) -> str:
    return "".join(f"# {line}\n".replace("# \n", "#\n") for line in text.strip("\n").splitlines())


def _fqdn(cluster: Cluster, hosts: str) -> str:
    return f"{nodeset(hosts)[0]}.{cluster.cluster.domain}"


# ---- the portal: ood_portal.yml -----------------------------------------------------------------


def portal_config(cluster: Cluster, cat: dict) -> str:
    p = cluster.portal
    config: dict = {"servername": cat["server_name"], "port": cat["port"]}
    if cat["port"] != 443:  # Apache's ssl.conf already listens on 443; a second Listen fails
        config["listen_addr_port"] = cat["port"]
    config["ssl"] = [
        f'SSLCertificateFile "{p.tls.certificate or CA_SIGNED_CERT}"',
        f'SSLCertificateKeyFile "{p.tls.key or CA_SIGNED_KEY}"',
    ]
    config["auth"] = [
        "AuthType Basic",
        f'AuthName "{cluster.cluster.name} portal: your cluster user name and password"',
        "AuthBasicProvider ldap",
        f'AuthLDAPURL "{ldap_url(cluster)}"',
        "RequestHeader unset Authorization",
        "Require valid-user",
    ]
    config["node_uri"] = NODE_URI
    config["rnode_uri"] = "/rnode"
    config["host_regex"] = session_host_regex(cluster)
    intro = _comment(f"""
Open OnDemand on {cat["server_name"]}: ood-portal-generator's update_ood_portal turns this
into Apache's ood-portal.conf. Users log in with their directory password (an anonymous
search for the uid under ou=People, then a bind as that entry), and the uid is the system
user. mod_ldap must trust the cluster CA ({CA_CERT}); LDAPTrustedGlobalCert
is server-wide, so it goes in Apache's own configuration, not here.
Sessions (/node/HOST/PORT/) are proxied to compute nodes only.
""")
    return _yaml(cluster, config, intro)


def ldap_url(cluster: Cluster) -> str:
    """mod_authnz_ldap's search URL: uid under ou=People, over LDAPS to the directory host."""
    a = cluster.accounts
    host = _fqdn(cluster, cluster.services.ldap) if cluster.services.ldap else ""
    port = a.directory.port if a is not None else 636
    base = base_dn(a, cluster.cluster.domain) if a is not None else ""
    return f"ldaps://{host}:{port}/ou=People,{base}?uid"


def session_host_regex(cluster: Cluster) -> str:
    """The compute nodes' names (short or fully qualified) as a regular expression: hal[01-16]
    -> hal[0-9]+; the portal proxies sessions to those hosts and no others."""
    folded = fold_hostlists(g.hosts for g in cluster.groups_with_role(Role.compute))  # cluster.slurm_nodes
    if not folded:
        return "[^/]+"
    patterns = []
    for expr in re.split(r",(?![^\[]*\])", folded):
        pieces = re.split(r"(\[[^\]]*\])", expr)
        patterns.append("".join("[0-9]+" if p.startswith("[") else re.escape(p) for p in pieces))
    domain = re.escape("." + cluster.cluster.domain)
    return f"(?:{'|'.join(dict.fromkeys(patterns))})(?:{domain})?"


# ---- the cluster: clusters.d/<name>.yml ---------------------------------------------------------


def cluster_file(cluster: Cluster) -> str:
    v2: dict = {"metadata": {"title": cluster.cluster.name}}
    logins = cluster.groups_with_role(Role.login)
    if logins:
        v2["login"] = {"host": _fqdn(cluster, logins[0].hosts)}
    v2["job"] = {"adapter": "slurm", "cluster": cluster.cluster.name, "bin": SLURM_BIN, "conf": SLURM_CONF}
    # The job starts from a clean module environment; each app's launch script loads its own.
    wrapper = "if ! type module >/dev/null 2>&1; then source /etc/profile.d/lmod.sh; fi\nmodule purge\n%s"
    v2["batch_connect"] = {"basic": {"script_wrapper": wrapper}, "vnc": {"script_wrapper": wrapper}}
    intro = _comment(f"""
How Open OnDemand submits to Slurm on {cluster.cluster.name}: the Slurm client commands and
slurm.conf on the portal node, which is a Slurm submit host.
""")
    return _yaml(cluster, {"v2": v2}, intro)


# ---- one batch_connect app per catalogue entry --------------------------------------------------


def app_files(cluster: Cluster, cat: dict, app: dict) -> dict[str, str]:
    root = app_dir(app)
    return {
        f"{root}/manifest.yml": manifest(cluster, app),
        f"{root}/form.yml": form(cluster, app),
        f"{root}/submit.yml.erb": submit(cluster, app),
        f"{root}/template/before.sh.erb": before_script(cluster, cat, app),
        f"{root}/template/script.sh.erb": main_script(cluster, app),
        f"{root}/template/after.sh.erb": after_script(cluster),
        f"{root}/view.html.erb": view(cluster, app),
    }


def manifest(cluster: Cluster, app: dict) -> str:
    return _yaml(
        cluster,
        {
            "name": app["title"],
            "category": "Interactive Apps",
            "subcategory": "Servers",
            "role": "batch_connect",
            "description": app["description"]
            or f"{app['title']} as a Slurm job on a compute node of {cluster.cluster.name}.",
        },
    )


def max_hours(app: dict) -> int:
    return max((vp["max_hours"] for vp in app["virtual_partitions"].values()), default=1)


def form(cluster: Cluster, app: dict) -> str:
    longest = max_hours(app)
    options = [
        [f"{name}: {vp['description']} (up to {vp['max_hours']} h)", name, {"data-max-bc-num-hours": vp["max_hours"]}]
        for name, vp in app["virtual_partitions"].items()
    ]
    data = {
        "cluster": cluster.cluster.name,
        "form": ["virtual_partition", "bc_num_hours"],
        "attributes": {
            "virtual_partition": {
                "widget": "select",
                "label": "Virtual partition",
                "help": "What the session gets, as `swbatch -p NAME` would ask Slurm for it.",
                "options": options,
            },
            "bc_num_hours": {
                "widget": "number_field",
                "label": "Hours",
                "value": min(app["default_hours"], longest),
                "min": 1,
                "max": longest,
                "step": 1,
            },
        },
    }
    intro = _comment("""
The choices: the app's virtual partitions (the wrapper suite's) and the session's hours.
submit.yml.erb turns them into Slurm options and refuses hours past the partition's limit.
""")
    return _yaml(cluster, data, intro)


def _ruby_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def submit(cluster: Cluster, app: dict) -> str:
    """The job's Slurm options: one `when` per virtual partition with its exact option list
    from the catalogue, then --time from the form's hours."""
    cases = []
    for name, vp in app["virtual_partitions"].items():
        options = "".join(f"      {_ruby_string(o)},\n" for o in vp["options"])
        cases.append(
            f"  when {_ruby_string(name)}\n    max_hours = {vp['max_hours']}\n    slurm_options = [\n{options}    ]\n"
        )
    return (
        header(cluster) + "# The session's Slurm job: the chosen virtual partition's options, exactly as\n"
        "# `swbatch -p <virtual partition>` gives them, and the hours asked for.\n"
        "<%-\n"
        "  case virtual_partition\n" + "".join(cases) + "  else\n"
        f'    raise ArgumentError, {_ruby_string(app["title"])} + " does not run on virtual partition "'
        " + virtual_partition.inspect\n"
        "  end\n"
        "  hours = bc_num_hours.to_i\n"
        "  unless (1..max_hours).cover?(hours)\n"
        '    raise ArgumentError, "#{virtual_partition} sessions last 1 to #{max_hours} hours, not #{hours}"\n'
        "  end\n"
        '  slurm_options += ["--time=#{hours}:00:00"]\n'
        "-%>\n"
        "---\n"
        "batch_connect:\n"
        '  template: "basic"\n'
        "script:\n"
        "  native:\n"
        "<%- slurm_options.each do |option| -%>\n"
        '    - "<%= option %>"\n'
        "<%- end -%>\n"
    )


def before_script(cluster: Cluster, cat: dict, app: dict) -> str:
    origin = f"https://{cat['server_name']}" + ("" if cat["port"] == 443 else f":{cat['port']}")
    return (
        header(cluster)
        + f'''\
# Sourced by Open OnDemand in the session's job before script.sh starts: the port and the
# password the portal connects with (OnDemand's find_port and create_passwd; it sets host
# and reads port and password back), and the Jupyter server's configuration.
port=$(find_port "${{host}}")
password=$(create_passwd 32)
salt=$(create_passwd 16)
password_hash=$(printf '%s%s' "${{password}}" "${{salt}}" | sha256sum | cut -d' ' -f1)

# script.sh runs as its own process: it finds the configuration through this variable.
export CONFIG_FILE="${{PWD}}/{SESSION_CONFIG}"

# Only the user may read it: it holds the password's hash.
(
umask 077
cat > "${{CONFIG_FILE}}" <<EOF
import os
c.ServerApp.ip = "0.0.0.0"
c.ServerApp.port = ${{port}}
c.ServerApp.port_retries = 0  # the portal proxies to exactly this port
c.ServerApp.base_url = "{NODE_URI}/${{host}}/${{port}}/"
c.ServerApp.default_url = {json.dumps(app["default_url"])}
c.ServerApp.root_dir = os.path.expanduser("~")
c.ServerApp.open_browser = False
c.ServerApp.allow_remote_access = True
c.ServerApp.allow_origin = {json.dumps(origin)}
# The portal's Connect button posts the password from its own page, without Jupyter's XSRF cookie.
c.ServerApp.disable_check_xsrf = True
c.PasswordIdentityProvider.hashed_password = "sha256:${{salt}}:${{password_hash}}"
c.IdentityProvider.token = ""  # the password alone logs in
EOF
)
'''
    )


def main_script(cluster: Cluster, app: dict) -> str:
    environment = "modules and container" if app["container"] else "modules"
    return (
        "#!/bin/bash\n"
        + header(cluster)
        + f'''\
# The session's main process, started by Open OnDemand in the job after before.sh: the app's
# launch script (its {environment}; the same script JupyterHub's sessions run) starts
# Jupyter with the configuration before.sh wrote.
echo "{_shell_words(app["title"])} on ${{host}}:${{port}} (job ${{SLURM_JOB_ID:-none}})"
cd "${{HOME}}"
exec {shlex.quote(app["launch"])} {JUPYTER_COMMAND[app["kind"]]} --config="${{CONFIG_FILE}}"
'''
    )


def after_script(cluster: Cluster) -> str:
    seconds = cluster.portal.start_timeout_seconds
    return (
        header(cluster)
        + f"""\
# Sourced by Open OnDemand once script.sh is started: the portal offers Connect only when the
# Jupyter server listens; a server that does not within {seconds} s ends the session.
echo "Waiting for the Jupyter server on ${{host}}:${{port}}..."
if wait_until_port_used "${{host}}:${{port}}" {seconds}; then
  echo "The Jupyter server listens on ${{host}}:${{port}}."
else
  echo "The Jupyter server did not open ${{host}}:${{port}} within {seconds} s." >&2
  clean_up 1
fi
sleep 2
"""
    )


def view(cluster: Cluster, app: dict) -> str:
    erb_header = "<%#\n" + header(cluster).replace("# ", "  ") + "-%>\n"
    return (
        erb_header
        + f'''\
<%-
  # Connect: log in to the session's Jupyter server with its password and open {app["default_url"]}.
  base_url = "{NODE_URI}/#{{host}}/#{{port}}"
  login_url = "#{{base_url}}/login?next=#{{CGI.escape("#{{base_url}}{app["default_url"]}")}}"
-%>
<form action="<%= login_url %>" method="post" target="_blank">
  <input type="hidden" name="password" value="<%= password %>">
  <button class="btn btn-primary" type="submit">
    <i class="fa fa-external-link"></i> Connect to {html.escape(app["title"])}
  </button>
</form>
'''
    )
