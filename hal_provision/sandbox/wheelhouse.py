"""The host's wheelhouse for the sandbox's nodes: the portal's Python packages and the module
environments' (software.modules[].pip, e.g. a CPU build of PyTorch) as wheels,
fetched (and built, for the few published only as source) once per machine, bound read-only
into every node, from which the portal role installs them with pip --no-index.

Measured on the session environment here: pip from the index 31 s, from a wheelhouse 20 s;
h2o, published as a source distribution only, is built once into a wheel instead of on every
node that installs it.
The requirements are those the portal role installs: the rendered catalogue's session
environment (JupyterHub and batchspawner first, at the hub's versions) and the role's own
hub-side additions (roles/portal/vars/main.yml), read from where they are kept.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from ..files import cache_dir

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = "files/etc/hal-provision/portal.json"
SOFTWARE = "files/etc/hal-provision/software.json"
# Where every node sees the wheelhouse (bound read-only); the sandbox inventory gives it to the
# portal role as portal_pip_wheelhouse.
NODE_WHEELHOUSE = "/var/cache/hal-provision/wheelhouse"


class WheelhouseError(RuntimeError):
    pass


def default_dir() -> Path:
    """One wheelhouse per machine and user, beside the other caches."""
    return cache_dir("wheelhouse")


def hub_extras(roles: Path = REPO / "roles") -> list[str]:
    import yaml

    data = yaml.safe_load((roles / "portal/vars/main.yml").read_text()) or {}
    return list(data.get("__portal_hub_extra_packages") or [])


def requirement_sets(files: dict[str, str]) -> tuple[list[str], dict[str, list[str]]]:
    """What the portal role pip-installs for this rendered tree, and what the lmod role installs
    into each module environment (by module, name/version)."""
    portal: set[str] = set()
    text = files.get(CATALOGUE)
    if text is not None:
        catalogue = json.loads(text)
        if catalogue.get("front_end") == "jupyterhub":
            portal |= set(catalogue["user_environment"]["packages"]) | set(hub_extras())
    software = json.loads(files.get(SOFTWARE) or "{}").get("lmod") or {}
    modules = {env["module"]: sorted(env["packages"]) for env in software.get("environments", [])}
    return sorted(portal), modules


def requirements(files: dict[str, str]) -> list[str]:
    """Everything the portal and lmod roles pip-install for this rendered tree."""
    portal, modules = requirement_sets(files)
    return sorted(set(portal).union(*modules.values()))


def fill_available(
    files: dict[str, str], wheelhouse: Path, image: str, pip_cert: Path | None = None, log=print
) -> dict[str, str]:
    """fill() for everything this tree's roles pip-install, or, where some module environment's
    packages are in none of this machine's pip sources (a CPU build of PyTorch, say, which PyPI
    does not carry), for the rest: returns those modules, each with pip's reason. The portal's
    own requirements must be there (WheelhouseError otherwise)."""
    portal, modules = requirement_sets(files)
    try:
        fill(requirements(files), wheelhouse, image, pip_cert, log)
        return {}
    except WheelhouseError:
        if not modules:
            raise
    fill(portal, wheelhouse, image, pip_cert, log)
    missing: dict[str, str] = {}
    for module, packages in modules.items():
        try:
            fill(sorted(set(portal) | set(packages)), wheelhouse, image, pip_cert, log)
        except WheelhouseError as exc:
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            missing[module] = next((ln for ln in lines if "No matching distribution" in ln), lines[-1] if lines else "")
    return missing


def host_find_links(environ: dict[str, str] | None = None) -> list[Path]:
    """The local directories the host's pip finds wheels in (PIP_FIND_LINKS and every
    find-links of pip's own configuration: global, install, wheel, download; user, global and
    site files): a wheel that is only there (a CPU build of PyTorch on this machine kind)
    reaches the nodes' wheelhouse the way the host's pip would find it."""
    environ = os.environ if environ is None else environ
    found = environ.get("PIP_FIND_LINKS", "").split()
    conf = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False, env=dict(environ)
    )
    if conf.returncode == 0:
        for line in conf.stdout.splitlines():
            key, _, value = line.partition("=")
            if key.strip().endswith(".find-links"):
                found += value.strip().strip("'\"").split()
    dirs = [Path(f.removeprefix("file://")) for f in found if not f.startswith(("http://", "https://"))]
    return list(dict.fromkeys(d for d in dirs if d.is_dir()))


def _stamp(reqs: list[str], image: str) -> str:
    return ".filled-" + hashlib.sha256("\n".join([image, *reqs]).encode()).hexdigest()[:16]


def fill(reqs: list[str], wheelhouse: Path, image: str, pip_cert: Path | None = None, log=print) -> Path:
    """Make sure `wheelhouse` holds wheels for `reqs` and everything they need, as the nodes'
    own Python resolves them: pip runs in a container of the node image (the host's Python
    may be newer than the nodes', and some packages require that). First offline from what
    the wheelhouse has, else from the index; a stamp per requirement set and image skips
    even that on the next `sandbox up`."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    if not reqs:
        return wheelhouse
    # One filler at a time (two sandboxes coming up at once, or the prefill CI runs beside
    # pytest and a scenario's `up`): the second waits, then finds the stamp the first wrote.
    with open(wheelhouse / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _fill_locked(reqs, wheelhouse, image, pip_cert, log)


def _fill_locked(reqs: list[str], wheelhouse: Path, image: str, pip_cert: Path | None, log) -> Path:
    stamp = wheelhouse / _stamp(reqs, image)
    if stamp.is_file():
        return wheelhouse
    args = ["podman", "run", "--rm", "--mount", f"type=bind,src={wheelhouse.resolve()},dst=/wheelhouse"]
    if pip_cert is not None:
        args += [
            "--mount",
            f"type=bind,src={pip_cert},dst=/etc/ssl/hal-wheelhouse.crt,ro=true",
            "--env",
            "PIP_CERT=/etc/ssl/hal-wheelhouse.crt",
        ]
    links = ""
    dirs = host_find_links()
    for i, d in enumerate(dirs):
        args += ["--mount", f"type=bind,src={d},dst=/find-links/{i},ro=true"]
        links += f" --find-links /find-links/{i}"
    quoted = " ".join(shlex.quote(r) for r in reqs)
    wheel = (
        "/tmp/pip/bin/pip --disable-pip-version-check wheel --quiet --use-pep517 --wheel-dir /wheelhouse "
        "--find-links /wheelhouse" + links
    )
    script = (
        f"python3 -m venv /tmp/pip && ( {wheel} --no-index {quoted} >/dev/null 2>&1 || "
        f"{{ echo fetching >&2; {wheel} {quoted}; }} )"
    )
    log(
        f"wheelhouse {wheelhouse}: {len(reqs)} requirements of the portal and the modules and what they need, "
        f"for the nodes' Python (from the index{''.join(', ' + str(d) for d in dirs)})"
    )
    proc = subprocess.run([*args, image, "sh", "-c", script], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise WheelhouseError(f"pip wheel into {wheelhouse} failed: {(proc.stderr or proc.stdout).strip()[-2000:]}")
    stamp.write_text("\n".join(reqs) + "\n")
    return wheelhouse
