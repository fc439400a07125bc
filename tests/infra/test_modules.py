"""Lmod on every node whose role sees modules, as the normal user in a login shell: `module
avail` lists exactly the role's modules, prerequisites load and unload with their module, a
second version (or family member) is refused or swapped as the model says, unloading restores
PATH, and the deployed tree and site files are the rendered ones.

Expectations come from the rendered plan files/etc/hal-provision/software.json."""

from __future__ import annotations

import hashlib
import json

import pytest

from deployed import TEST_USER, deployed

D = deployed()
PLAN = json.loads(D.rendered("etc/hal-provision/software.json") or "{}").get("lmod")
ROLES = (PLAN or {}).get("roles", {})
HOSTS = [(h, D.hostvars[h].get("hal_role")) for h in D.hostvars if D.hostvars[h].get("hal_role") in ROLES]
ON_HOST = [pytest.param(h, r, id=h) for h, r in HOSTS]

pytestmark = pytest.mark.skipif(not HOSTS, reason="the model gives no node role any module")


def module(host: str, script: str, ok: bool = True) -> tuple[int, str]:
    """Run module commands as the test user in a login shell; Lmod writes to stderr."""
    out = D.as_user(host, f"{{ {script} ; }} 2>&1", 60)
    if ok:
        assert out.rc == 0, f"as {TEST_USER} on {host}: {script}\nexit {out.rc}\n{out.stdout}{out.stderr}"
    return out.rc, out.stdout


def terse(text: str) -> list[str]:
    """Module names of `module -t avail|list|spider` output (no directories, no NAME/ lines)."""
    return sorted(
        {
            ln.strip()
            for ln in text.splitlines()
            if "/" in ln and not ln.strip().endswith(("/", ":")) and " " not in ln.strip()
        }
    )


def core_with(role: str, key: str) -> list[str]:
    return [m for m in ROLES[role]["core"] if PLAN["modules"][m][key]]


def by_name(role: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in ROLES[role]["core"]:
        out.setdefault(m.split("/")[0], []).append(m)
    return out


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_avail_lists_exactly_the_role_modules(host, role):
    _rc, out = module(host, "module -t avail")
    assert terse(out) == sorted(ROLES[role]["core"]), out


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_compiler_opens_its_level(host, role):
    for compiler, modules in ROLES[role]["by_compiler"].items():
        _rc, out = module(host, f"module load {compiler} && module -t avail")
        assert terse(out) == sorted(ROLES[role]["core"] + modules), out


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_loading_a_module_loads_its_prerequisites(host, role):
    checked = core_with(role, "requires")
    if not checked:
        pytest.skip(f"no module of role {role} has a prerequisite")
    for name in checked:
        _rc, out = module(host, f"module load {name} && module -t list")
        loaded = terse(out)
        for ref in PLAN["modules"][name]["requires"]:
            assert any(m == ref or m.startswith(ref + "/") for m in loaded), f"{name} did not load {ref}: {out}"


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_unloading_restores_path(host, role):
    names = core_with(role, "requires") or ROLES[role]["core"][:1]
    script = "; ".join(
        ["P0=$PATH"]
        + [f"module load {n}" for n in names[:1]]
        + [f"module unload {n}" for n in names[:1]]
        + ['[ "$PATH" = "$P0" ] && echo PATH-RESTORED', "module -t list"]
    )
    _rc, out = module(host, script)
    assert "PATH-RESTORED" in out and terse(out) == [], out


def _second_load(host: str, first: str, second: str) -> None:
    rc, out = module(host, f"module load {first}; module load {second}; echo LOAD=$?; module -t list", ok=False)
    loaded = terse(out)
    if PLAN["on_conflict"] == "refuse":
        assert "LOAD=1" in out and first in loaded and second not in loaded, out
    else:
        assert "LOAD=0" in out and second in loaded and first not in loaded, out


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_second_version_is_refused_or_swapped(host, role):
    pairs = [versions[:2] for versions in by_name(role).values() if len(versions) > 1]
    if not pairs:
        pytest.skip(f"no module of role {role} has two versions")
    for first, second in pairs:
        _second_load(host, first, second)


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_second_family_member_is_refused_or_swapped(host, role):
    families: dict[str, list[str]] = {}
    for m in ROLES[role]["core"]:
        families.setdefault(PLAN["modules"][m]["family"], [])
        if m.split("/")[0] not in {x.split("/")[0] for x in families[PLAN["modules"][m]["family"]]}:
            families[PLAN["modules"][m]["family"]].append(m)
    pairs = [members[:2] for members in families.values() if len(members) > 1]
    if not pairs:
        pytest.skip(f"no family of role {role} has two module names")
    for first, second in pairs:
        _second_load(host, first, second)


def _digests(host: str, root: str) -> dict[str, str]:
    out = D.host(host).run("cd %s && find . -type f -exec sha256sum {} + | sort -k2", root)
    assert out.rc == 0, out.stderr
    return {path[2:]: digest for digest, path in (ln.split(None, 1) for ln in out.stdout.splitlines())}


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_module_tree_is_the_rendered_one(host, role):
    root = PLAN["modulefiles_root"]
    rendered = {
        p.relative_to(D.files / root.lstrip("/")).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (D.files / ROLES[role]["tree"].lstrip("/")).rglob("*")
        if p.is_file()
    }
    assert _digests(host, root) == rendered


@pytest.mark.parametrize(
    ("host", "path"), [pytest.param(h, p, id=f"{h}:{p}") for h, _r in HOSTS for p in (PLAN or {}).get("files", [])]
)
def test_site_file_is_the_rendered_one(host, path):
    f = D.host(host).file(path)
    assert f.exists and f.content == (D.files / path.lstrip("/")).read_bytes() and f.user == "root"


@pytest.mark.parametrize(("host", "role"), ON_HOST)
def test_spider_cache_knows_every_module(host, role):
    assert D.host(host).file(f"{PLAN['spider_cache_dir']}/spiderT.lua").exists
    _rc, out = module(host, "module -t spider")
    everything = ROLES[role]["core"] + [m for ms in ROLES[role]["by_compiler"].values() for m in ms]
    assert terse(out) == sorted(everything), out


ENVIRONMENTS = [
    pytest.param(h, env["module"], id=f"{h}:{env['module']}")
    for h, r in HOSTS
    for env in (PLAN or {}).get("environments", [])
    if r in env["roles"] and any(p.startswith("torch") for p in env["packages"])
]


@pytest.mark.parametrize(("host", "name"), ENVIRONMENTS)
def test_the_cpu_framework_module_has_numpy_and_torch_takes_arrays(host, name):
    """A PyTorch module as a user expects it: numpy there, torch sharing its arrays, and no
    'Failed to initialize NumPy' warning at import."""
    _rc, out = module(
        host,
        f"module load {name} && python -c 'import numpy, torch; "
        f'print("SUM", int(torch.from_numpy(numpy.arange(4)).sum()), numpy.__version__)\'',
    )
    assert "Failed to initialize NumPy" not in out and "No module named" not in out, out
    assert [ln for ln in out.splitlines() if ln.startswith("SUM ")][0].split()[1] == "6", out
