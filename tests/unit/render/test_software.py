"""Software environment: the module and fakeroot checks (one row per mistake, as an edit of the
embedded HAL description) and the renderers of modulefiles, Lmod and runtime configuration and
subordinate ID files."""

from __future__ import annotations

import json
import re

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load_text
from hal_provision.model.software import FAKEROOT_MIN_COUNT, Fakeroot, fakeroot_ranges
from hal_provision.render import software as sw
from hal_provision.render.common import header

E, W = Level.error, Level.warning

PY27 = "version: 1.7.0-py2.7, kind: framework, "
PY36 = "version: 1.7.0-py3.6, kind: framework, "
CUDA = "      description: NVIDIA CUDA toolkit\n"
AT = "      description: IBM Advance Toolchain for Linux on Power\n"
OMPI = "      compiler: pgi/19.10\n"
HALTEST = "      - name: haltest                         # the verification user (uid 3001, role common)\n"

FAKEROOT_GROUP = """    groups:
      - name: hal-containers                  # [assumed] the directory group of fakeroot users: its
        description: users allowed fakeroot   #   members in accounts.users get ranges, in their order
"""

ROWS = [
    # --- modules -------------------------------------------------------------------------------
    (
        "prerequisite-unknown",
        [(PY27 + "requires: [cuda/10.2]", PY27 + "requires: [cuda/10.3]")],
        E,
        "software.modules[1].requires[0]",
        "prerequisite 'cuda/10.3' of 'wmlce/1.7.0-py2.7' is not a module of the model; did you mean 'cuda/10.2'?",
    ),
    (
        "prerequisite-name-unknown",
        [(PY27 + "requires: [cuda/10.2]", PY27 + "requires: [cudnn]")],
        E,
        "software.modules[1].requires[0]",
        "prerequisite 'cudnn' of 'wmlce/1.7.0-py2.7' is not a module",
    ),
    (
        "prerequisite-not-visible-everywhere",
        [(CUDA, CUDA + "      roles: [login, compute]\n")],
        E,
        "software.modules[1].requires[0]",
        "prerequisite 'cuda/10.2' of 'wmlce/1.7.0-py2.7' is not visible on development nodes: loading "
        "'wmlce/1.7.0-py2.7' there fails",
    ),
    (
        "prerequisite-below-a-compiler",
        [(PY27 + "requires: [cuda/10.2]", PY27 + "requires: [openmpi]")],
        E,
        "software.modules[1].requires[0]",
        "'openmpi' of 'wmlce/1.7.0-py2.7' is only visible after loading 'pgi/19.10'",
    ),
    (
        "prerequisite-own-name",
        [(PY27 + "requires: [cuda/10.2]", PY27 + "requires: [wmlce/1.7.0-py3.7]")],
        E,
        "software.modules[1].requires[0]",
        "requires its own name 'wmlce/1.7.0-py3.7'",
    ),
    (
        "prerequisite-not-a-reference",
        [(PY27 + "requires: [cuda/10.2]", PY27 + "requires: [cuda/10/2]")],
        E,
        "software.modules[1].requires[0]",
        "'cuda/10/2' is not a module reference",
    ),
    (
        "compiler-unknown",
        [(OMPI, "      compiler: pgi/19.9\n")],
        E,
        "software.modules[5].compiler",
        "'openmpi/3.1.3' is built with 'pgi/19.9', which is not a Core compiler "
        "module NAME/VERSION of the model; did you mean 'pgi/19.10'?",
    ),
    (
        "compiler-not-a-compiler",
        [(OMPI, "      compiler: cuda/10.2\n")],
        E,
        "software.modules[5].compiler",
        "built with 'cuda/10.2', which is not a Core compiler module",
    ),
    (
        "compiler-hidden-where-module-is",
        [(OMPI, OMPI + "      roles: [login, compute, data_transfer]\n")],
        E,
        "software.modules[5].compiler",
        "visible on data_transfer nodes, where its compiler 'pgi/19.10' is not",
    ),
    (
        "two-defaults",
        [(PY36, PY36 + "default: true, ")],
        E,
        "software.modules[3].default",
        "'wmlce/1.7.0-py3.7' is a second default of 'wmlce' (software.modules[2]",
    ),
    (
        "module-twice",
        [("version: 1.7.0-py3.6,", "version: 1.7.0-py2.7,")],
        E,
        "software.modules[2].version",
        "module 'wmlce/1.7.0-py2.7' is already declared by software.modules[1]",
    ),
    (
        "compute-but-not-login",
        [(AT, AT + "      roles: [compute, development]\n")],
        W,
        "software.modules[6].roles",
        "'at/12.0' is visible on compute nodes but not on login nodes",
    ),
    (
        "default-roles-without-login",
        [("  on_conflict: refuse ", "  default_roles: [compute]\n  on_conflict: refuse ")],
        W,
        "software.default_roles",
        "visible on compute nodes by default but not on login nodes",
    ),
    (
        "conflict-unknown",
        [(AT, AT + "      conflicts: [xlc]\n")],
        W,
        "software.modules[6].conflicts[0]",
        "'at/12.0' conflicts with 'xlc', which is not a module of the model",
    ),
    (
        "module-kind-unknown",
        [("      kind: library\n", "      kind: libary\n")],
        E,
        "software.modules[0].kind",
        "Input should be 'compiler', 'mpi', 'framework', 'library' or 'tool'",
    ),
    # --- containers and fakeroot ---------------------------------------------------------------
    (
        "bind-unknown-filesystem",
        [("bind_filesystems: [halfs, misc]", "bind_filesystems: [halfs, misc-nfs]")],
        E,
        "containers.bind_filesystems[1]",
        "'misc-nfs' is not a shared filesystem of the model (GPFS file system or NFS export); did you mean 'misc'?",
    ),
    (
        "fakeroot-range-too-small",
        [("    count: 65536 ", "    count: 4096 ")],
        E,
        "containers.fakeroot.count",
        "4096 subordinate IDs per user is too few: a user namespace needs 65536",
    ),
    (
        "fakeroot-range-on-real-ids",
        [("    first_subid: 1000000 ", "    first_subid: 900000 ")],
        E,
        "containers.fakeroot.first_subid",
        "haltest's range 900000-965535 takes real IDs 900000-965535 of 100000-999999 ([assumed] NCSA LDAP accounts); "
        "start subordinate ranges above 999999",
    ),
    (
        "fakeroot-pinned-ranges-overlap",
        [(HALTEST, "      - {name: haltest, first_subid: 2000000}\n      - {name: alice, first_subid: 2030000}\n")],
        E,
        "containers.fakeroot.users[1].first_subid",
        "alice's range 2030000-2095535 overlaps haltest's 2000000-2065535 (IDs 2030000-2065535)",
    ),
    (
        "fakeroot-pinned-on-local-ids",
        [(HALTEST, "      - {name: haltest, first_subid: 3001}\n")],
        E,
        "containers.fakeroot.users[0].first_subid",
        "takes real IDs 3001-65535 of 0-65535",
    ),
    (
        "fakeroot-range-beyond-maximum",
        [(HALTEST, "      - {name: haltest, first_subid: 4294900000}\n")],
        E,
        "containers.fakeroot.users[0].first_subid",
        "ends beyond what Apptainer maps",
    ),
    (
        "fakeroot-user-twice",
        [(HALTEST, HALTEST + "      - name: haltest\n")],
        E,
        "containers.fakeroot.users[1].name",
        "fakeroot user 'haltest' is already used by containers.fakeroot.users[0]",
    ),
    (
        "fakeroot-without-users",
        [("    users:\n" + HALTEST, "    users: []\n"), (FAKEROOT_GROUP, "    groups: []\n")],
        W,
        "containers.fakeroot",
        "fakeroot is enabled, but no user gets a range",
    ),
    (
        "real-id-range-reversed",
        [("{first: 100000, last: 999999,", "{first: 999999, last: 100000,")],
        E,
        "containers.fakeroot.real_ids[1]",
        "real ID range 999999-100000 ends before it starts",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


PYTORCH_PIP = (
    '      pip: {packages: ["torch==2.13.0+cpu", "numpy==2.3.5"]}   # numpy: torch.from_numpy, no warning at import\n'
)

ACCEPTED = [
    ("swap-on-conflict", [("  on_conflict: refuse ", "  on_conflict: swap ")]),
    ("apptainer", [("  runtime: singularity\n", "  runtime: apptainer\n")]),
    (
        "group-member-also-a-user",
        [
            (
                "        description: users allowed fakeroot ",
                "        members: [haltest, alice, jdoe]\n        description: users allowed fakeroot ",
            )
        ],
    ),
    (
        "pinned-range-among-automatic-ones",
        [(HALTEST, HALTEST + "      - {name: alice, first_subid: 1065536}\n      - {name: bob}\n")],
    ),
    ("fakeroot-off", [("    enabled: true                             # [paper]", "    enabled: false")]),
    ("no-containers", [lambda t: t[: t.index("\ncontainers:")] + t[t.index("\nportal:") :]]),
    ("no-modules", [lambda t: t[: t.index("\nsoftware:")] + t[t.index("\ncontainers:") :]]),
    ("prerequisite-any-version", [(PY27 + "requires: [cuda/10.2]", PY27 + "requires: [cuda]")]),
    ("mpi-requires-same-level", [(OMPI, OMPI + "      requires: [cuda/10.2]\n")]),
    (
        "pip-environment-from-a-wheelhouse",
        [
            ("  on_conflict: refuse ", "  wheelhouse: /sw/wheels\n  on_conflict: refuse "),
            (PYTORCH_PIP, '      pip: {packages: ["torch>=2.12,<2.14"], python: python3.11}\n'),
        ],
    ),
]


@pytest.mark.parametrize("mutation", [pytest.param(m, id=name) for name, m in ACCEPTED])
def test_valid_variation_is_accepted(edited, mutation):
    from hal_provision.checks import run_all

    loaded = load_text(edited(*mutation), "c.yml")
    assert loaded.model is not None, loaded.findings
    ours = [f.format() for f in run_all(loaded.model) if f.path[:1] in (("software",), ("containers",))]
    assert ours == []


def test_embedded_hal_software_is_clean(hal):
    from hal_provision.checks import run_all

    assert [f.format() for f in run_all(hal) if f.path[:1] in (("software",), ("containers",))] == []


# ---- renderers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def software_files(hal):
    """What the software renderer alone makes of HAL (conftest's `files` is the whole tree)."""
    return sw.render(hal)


@pytest.fixture(scope="module")
def plan(software_files):
    return json.loads(software_files[sw.MANIFEST])


def tree_modules(files: dict[str, str], role: str, level: str = "Core") -> list[str]:
    root = f"files/opt/hal/modulefiles/{role}/{level}/"
    return sorted(
        p[len(root) : -4]
        for p in files
        if p.startswith(root)
        and p.endswith(".lua")
        and not p.endswith(".modulerc.lua")
        and p[len(root) :].count("/") == 1
    )


def test_hal_trees_hold_the_published_stack_for_each_role(software_files, plan):
    core = [
        "at/12.0",
        "cuda/10.2",
        "jupyter/2026.11",
        "pgi/19.10",
        "pytorch/2.13.0-cpu",
        "wmlce/1.7.0-py2.7",
        "wmlce/1.7.0-py3.6",
        "wmlce/1.7.0-py3.7",
    ]  # jupyter: the portal's session environment
    assert sorted(plan["lmod"]["roles"]) == ["compute", "development", "login"]
    for role, entry in plan["lmod"]["roles"].items():
        assert tree_modules(software_files, role) == sorted(entry["core"]) == core
        assert tree_modules(software_files, role, "Compiler/pgi/19.10") == ["openmpi/3.1.3"]
        assert entry["by_compiler"] == {"pgi/19.10": ["openmpi/3.1.3"]}
        assert entry["modulepath"] == f"/opt/hal/modulefiles/{role}/Core"


def test_login_and_compute_trees_differ_only_in_their_own_paths(software_files):
    def tree(role):
        root = f"files/opt/hal/modulefiles/{role}/"
        return {
            p[len(root) :]: t.replace(f"/modulefiles/{role}/", "/modulefiles/ROLE/")
            for p, t in software_files.items()
            if p.startswith(root)
        }

    assert tree("login") == tree("compute") and tree("login")


def test_modulefile_sets_family_prerequisite_paths_and_variables(hal, software_files):
    text = software_files["files/opt/hal/modulefiles/login/Core/wmlce/1.7.0-py3.7.lua"]
    assert text.startswith(header(hal, "--"))
    assert 'family("wmlce")\n' in text and 'depends_on("cuda/10.2")\n' in text
    assert 'prepend_path("PATH", "/sw/wmlce/1.7.0-py3.7/bin")\n' in text
    assert 'setenv("CONDA_PREFIX", "/sw/wmlce/1.7.0-py3.7")\n' in text
    cuda = software_files["files/opt/hal/modulefiles/compute/Core/cuda/10.2.lua"]
    assert 'prepend_path("LD_LIBRARY_PATH", "/sw/cuda/10.2/lib64")\n' in cuda and 'family("cuda")' in cuda


def test_compiler_opens_its_level_of_the_hierarchy_for_its_role_only(software_files):
    pgi = software_files["files/opt/hal/modulefiles/compute/Core/pgi/19.10.lua"]
    assert 'prepend_path("MODULEPATH", "/opt/hal/modulefiles/compute/Compiler/pgi/19.10")\n' in pgi
    assert 'family("compiler")' in pgi
    assert "MODULEPATH" not in software_files["files/opt/hal/modulefiles/compute/Core/at/12.0.lua"]
    ompi = software_files["files/opt/hal/modulefiles/compute/Compiler/pgi/19.10/openmpi/3.1.3.lua"]
    assert 'family("mpi")' in ompi and "/sw/pgi/19.10/openmpi/3.1.3/bin" in ompi


def test_one_default_per_name_with_a_choice(software_files):
    rcs = sorted(p for p in software_files if p.endswith(".modulerc.lua") and "/login/" in p)
    assert rcs == ["files/opt/hal/modulefiles/login/Core/wmlce/.modulerc.lua"]
    assert software_files[rcs[0]].endswith('module_version("wmlce/1.7.0-py3.7", "default")\n')


def test_lmod_site_configuration(software_files):
    paths = [ln for ln in software_files["files/etc/lmod/modulespath"].splitlines() if not ln.startswith("#")]
    assert paths == [f"/opt/hal/modulefiles/{r}/Core" for r in ("compute", "development", "login")]
    assert (
        '{dir = "/var/cache/lmod", timestamp = "/var/cache/lmod/timestamp"}'
        in software_files["files/etc/lmod/lmodrc.lua"]
    )
    profile = software_files["files/etc/profile.d/hal-lmod.sh"]
    assert "export LMOD_AUTO_SWAP=no\n" in profile and "export LMOD_DISABLE_SAME_NAME_AUTOSWAP=yes\n" in profile


def test_swap_configuration(edited):
    files = sw.render(load_text(edited(("  on_conflict: refuse ", "  on_conflict: swap ")), "c.yml").model)
    profile = files["files/etc/profile.d/hal-lmod.sh"]
    assert "export LMOD_AUTO_SWAP=yes\n" in profile and "export LMOD_DISABLE_SAME_NAME_AUTOSWAP=no\n" in profile


def test_roles_without_nodes_get_no_tree(edited):
    no_dev = edited(lambda t: re.sub(r"  - name: dev\n(    .*\n)+", "", t))
    files = sw.render(load_text(no_dev, "c.yml").model)
    roles = {p.split("/")[4] for p in files if p.startswith("files/opt/hal/modulefiles/")}
    assert roles == {"compute", "login"}
    assert "/opt/hal/modulefiles/development/Core" not in files["files/etc/lmod/modulespath"]


def test_module_visible_on_some_roles_only(edited):
    files = sw.render(load_text(edited((AT, AT + "      roles: [login]\n")), "c.yml").model)
    assert "at/12.0" in tree_modules(files, "login") and "at/12.0" not in tree_modules(files, "compute")


def test_runtime_config_binds_the_model_filesystems_and_gpus(software_files):
    conf = software_files["files/etc/singularity/singularity.conf"]
    assert re.findall(r"^bind path = (\S+)$", conf, re.M) == ["/etc/localtime", "/etc/hosts", "/home", "/sw"]
    assert "always use nv = yes\n" in conf and "allow setuid = yes\n" in conf


def test_filesystem_mounts_are_a_model_rule(edited):
    """Name -> mount point lives in the model: the bind check and the runtime config both read it,
    and checks never import renderers. GPFS file systems by name, NFS mounts by export; an
    export mounted at a second place keeps its first mount point."""
    first = "      - {export: misc, mount_point: /misc-first, clients: hal-login}\n"
    model = load_text(edited(("    mounts:\n", "    mounts:\n" + first)), "c.yml").model
    assert model.storage.filesystem_mounts() == {
        "halfs": "/home",
        "misc": "/misc-first",
        "backup": "/backup",
        "backup-mgmt2": "/backup-mgmt2",
    }
    hal = load_text(edited(), "c.yml").model
    assert hal.storage.filesystem_mounts() == {
        "halfs": "/home",
        "misc": "/sw",
        "backup": "/backup",
        "backup-mgmt2": "/backup-mgmt2",
    }


def test_apptainer_config_path(edited):
    files = sw.render(
        load_text(
            edited(("  runtime: singularity\n", "  runtime: apptainer\n"), ("  gpu: true ", "  gpu: false ")), "c.yml"
        ).model
    )
    assert "always use nv = no\n" in files["files/etc/apptainer/apptainer.conf"]
    assert not any("singularity" in p for p in files)


def test_subid_files_give_each_active_fakeroot_user_one_range_above_real_ids(software_files, plan):
    """haltest is listed; jdoe and pformer are the directory group hal-containers' members:
    pformer is disabled, so the slot after jdoe's stays reserved and unwritten."""
    entries = [ln for ln in software_files["files/etc/subuid"].splitlines() if not ln.startswith("#")]
    assert entries == ["haltest:1000000:65536", "jdoe:1065536:65536"]
    assert software_files["files/etc/subgid"] == software_files["files/etc/subuid"]
    assert plan["containers"]["fakeroot"]["ranges"] == [
        {"user": "haltest", "first": 1000000, "count": 65536},
        {"user": "jdoe", "first": 1065536, "count": 65536},
    ]


def test_a_disabled_directory_user_keeps_a_reserved_slot(edited):
    """Enabling pformer again gives back the same slot; nobody after moves when they leave."""
    text = edited(("      state: disabled\n", ""))
    files = sw.render(load_text(text, "c.yml").model)
    entries = [ln for ln in files["files/etc/subuid"].splitlines() if not ln.startswith("#")]
    assert entries == ["haltest:1000000:65536", "jdoe:1065536:65536", "pformer:1131072:65536"]


def test_subid_header_lines_are_skipped_by_shadow_and_apptainer(software_files):
    """Both parsers treat a line with fewer than three ':'-separated fields as no entry."""
    for line in software_files["files/etc/subuid"].splitlines():
        if line.startswith("#"):
            assert line.count(":") < 2, line


def test_fakeroot_off_leaves_subid_files_without_entries(edited):
    files = sw.render(
        load_text(
            edited(("    enabled: true                             # [paper]", "    enabled: false")), "c.yml"
        ).model
    )
    assert [ln for ln in files["files/etc/subuid"].splitlines() if not ln.startswith("#")] == []


def ranges_of(**kw):
    return [(r.user, r.first, r.last) for r in fakeroot_ranges(Fakeroot.model_validate({"enabled": True, **kw}))]


def test_ranges_are_consecutive_slots_in_declaration_order():
    got = ranges_of(users=[{"name": "zoe"}, {"name": "adam"}], groups=[{"name": "g", "members": ["eve", "zoe"]}])
    assert got == [("zoe", 1000000, 1065535), ("adam", 1065536, 1131071), ("eve", 1131072, 1196607)]


def test_appending_a_user_moves_nobody():
    before = ranges_of(users=[{"name": "b"}, {"name": "a"}])
    after = ranges_of(users=[{"name": "b"}, {"name": "a"}, {"name": "c"}])
    assert after[:2] == before


def test_automatic_slots_skip_pinned_ranges():
    got = ranges_of(users=[{"name": "a"}, {"name": "p", "first_subid": 1065536}, {"name": "b"}])
    assert got == [("a", 1000000, 1065535), ("p", 1065536, 1131071), ("b", 1131072, 1196607)]
    assert all(last - first + 1 >= FAKEROOT_MIN_COUNT for _u, first, last in got)


def test_disabled_fakeroot_allocates_nothing():
    assert fakeroot_ranges(Fakeroot(users=[{"name": "a"}])) == []


def test_plan_lists_every_cluster_wide_file_it_names(software_files, plan):
    for rel in plan["lmod"]["files"] + plan["containers"]["files"]:
        assert f"files{rel}" in software_files, rel
    assert plan["containers"]["roles"] == ["compute", "development", "login"]
    assert plan["lmod"]["roles"]["login"]["defaults"] == {"wmlce": "wmlce/1.7.0-py3.7"}


def test_nothing_rendered_without_modules_or_containers(edited):
    text = edited(lambda t: t[: t.index("\nsoftware:")] + t[t.index("\nportal:") :])
    assert sw.render(load_text(text, "c.yml").model) == {}


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("a", '"a"'),
        ('say "hi"', r'"say \"hi\""'),
        ("back\\slash", r'"back\\slash"'),
        ("line\nbreak", r'"line\010break"'),
    ],
)
def test_lua_string_literals(value, literal):
    assert sw.lua(value) == literal


@pytest.mark.parametrize("role", ["lmod", "containers"])
def test_role_argument_specs_cover_every_default(role):
    from pathlib import Path

    from ruamel.yaml import YAML

    root = Path(__file__).resolve().parents[3] / "roles" / role
    defaults = YAML(typ="safe").load((root / "defaults" / "main.yml").read_text())
    options = YAML(typ="safe").load((root / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    assert sorted(defaults) == sorted(options)
    assert all(spec.get("type") and spec.get("description") for spec in options.values())
    assert all(name.startswith(f"{role}_") for name in defaults)


def test_module_environments_are_in_the_plan_for_the_lmod_role(plan):
    assert plan["lmod"]["environments"] == [
        {
            "module": "pytorch/2.13.0-cpu",
            "prefix": "/sw/pytorch/2.13.0-cpu",
            "python": "python3",
            "packages": ["torch==2.13.0+cpu", "numpy==2.3.5"],
            "roles": ["login", "development", "compute"],
        }
    ]
    assert plan["lmod"]["wheelhouse"] is None  # HAL names none: pip uses the index as configured


@pytest.mark.parametrize(
    ("package", "ok"),
    [
        ("torch==2.13.0+cpu", True),
        ("numpy>=1.26,<3", True),
        ("jupyterlab[full]==4.2", True),
        ("torch; rm -rf /", False),
        ("--index-url=http://x", False),
        ("", False),
    ],
)
def test_a_pip_requirement_is_a_requirement_not_a_command(package, ok):
    from pydantic import ValidationError

    from hal_provision.model.software import PipEnvironment

    if ok:
        assert PipEnvironment(packages=[package]).packages == [package]
    else:
        with pytest.raises(ValidationError):
            PipEnvironment(packages=[package])
