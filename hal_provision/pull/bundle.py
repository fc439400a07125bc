"""The node bundle of pull mode: everything a compute node needs to converge itself,
as one deterministic tar.gz, its manifest and the current.json that points at it.

Members, under the top directory `bundle/`: ansible.cfg (the checkout's, with the collection
found beside it), playbooks/**, roles/**, collections/ansible_collections/hal/provision/**, files/**
(the rendered tree), inventory/hosts.json (a static inventory: every host with its variables
merged as `ansible-inventory --list` shows them, and every group, in the YAML inventory
plugin's form, which ansible-playbook reads without any plugin of ours), node/ (the node
program and the hostlist module it imports) and manifest.json.

version = the first 16 hex digits of sha256(model_hash + code_hash); model_hash is the sha256
of the model's canonical JSON; code_hash the sha256 over the sorted (path, sha256) of every
member that is not rendered from the model. The tar.gz is byte-identical for the same model and
code: sorted members, mtime 0, uid and gid 0, no names, gzip without a time or file name.

Pure: reads the checkout's files, writes nothing (`hal-provision bundle` writes).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from .. import __version__
from ..inventory.documents import tree_documents
from ..inventory.groups import list_inventory

PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parent
TOP = "bundle"
MANIFEST = f"{TOP}/manifest.json"
INVENTORY = f"{TOP}/inventory/hosts.json"
RENDERED = f"{TOP}/files/"
COLLECTION = "collections/ansible_collections/hal/provision"
# The programs the roles install on the nodes, where the roles look for them beside playbooks/
# ({{ playbook_dir }}/../hal_provision/node/...): hal-converge among them, so a published bundle
# updates the node's own program.
NODE_TREE = PACKAGE / "node"
NODE_LIBRARY = {"hal_provision/hostlist.py": PACKAGE / "hostlist.py"}
SKIPPED_DIRS = {"__pycache__", ".pytest_cache"}
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- members -------------------------------------------------------------------------------


def _tree(root: Path, prefix: str) -> dict[str, bytes]:
    """Regular files under `root` (symbolic links and caches left out), keyed prefix/relative."""
    out = {}
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not (Path(directory) / d).is_symlink())
        for name in names:
            path = Path(directory) / name
            if name.endswith(SKIPPED_SUFFIXES) or path.is_symlink() or not path.is_file():
                continue
            out[f"{prefix}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    return out


def bundle_ansible_cfg(text: str) -> str:
    """The checkout's ansible.cfg with the collection where the bundle has it."""
    lines = [
        f"collections_path = {COLLECTION.split('/')[0]}" if line.startswith("collections_path") else line
        for line in text.splitlines()
    ]
    return "\n".join(lines) + "\n"


def code_members(repo: Path = REPO) -> dict[str, bytes]:
    """The members that do not come from the model: ansible.cfg, playbooks, roles, the
    collection, the node program; keyed by member path (bundle/...)."""
    members = {f"{TOP}/ansible.cfg": bundle_ansible_cfg((repo / "ansible.cfg").read_text(encoding="utf-8")).encode()}
    members.update(_tree(repo / "playbooks", f"{TOP}/playbooks"))
    members.update(_tree(repo / "roles", f"{TOP}/roles"))
    members.update(_tree(repo / "hal_provision" / "ansible_collections" / "hal" / "provision", f"{TOP}/{COLLECTION}"))
    members.update(_tree(NODE_TREE, f"{TOP}/hal_provision/node"))
    for member, path in NODE_LIBRARY.items():
        members[f"{TOP}/{member}"] = path.read_bytes()
    return members


def rendered_members(files: dict[str, str], inventory: dict) -> dict[str, bytes]:
    """The members rendered from the model: the tree's files/ and the static inventory."""
    members = {f"{TOP}/{path}": text.encode("utf-8") for path, text in files.items() if path.startswith("files/")}
    # Not sorted: the order of a group's hosts and children is the inventory's.
    members[INVENTORY] = (json.dumps(inventory, indent=1) + "\n").encode()
    return members


# ---- the static inventory (the listing is hal_provision.inventory's) ------------------------


def static_inventory(listing: dict) -> dict:
    """An `ansible-inventory --list` listing as an inventory file Ansible's yaml plugin reads
    (JSON is YAML): every host under `all` with its merged variables, the groups nested as
    listed. `ansible-inventory -i` of it lists the same (tests/unit/pull/test_bundle.py)."""
    done: set[str] = set()

    def nest(name: str) -> dict:
        if name in done:
            return {}
        done.add(name)
        entry = listing.get(name, {})
        out: dict = {}
        if entry.get("hosts"):
            out["hosts"] = {host: None for host in entry["hosts"]}
        if entry.get("children"):
            out["children"] = {child: nest(child) for child in entry["children"]}
        return out

    children = {name: nest(name) for name in listing["all"].get("children", []) if name != "ungrouped"}
    return {"all": {"hosts": listing["_meta"]["hostvars"], "children": children}}


# ---- hashes, manifest, archive ------------------------------------------------------------


def model_hash(model) -> str:
    """sha256 of the model's canonical JSON (every field, defaults included; sorted keys)."""
    return sha256(json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode())


def code_hash(code: dict[str, bytes]) -> str:
    return sha256("".join(f"{path}\0{sha256(data)}\n" for path, data in sorted(code.items())).encode())


def version_of(model_digest: str, code_digest: str, files_digest: str) -> str:
    """The bundle's version: its model, its code and its rendered files (a tree rendered with
    more than the model, as the sandbox's harness settings, is another bundle), 16 hex digits."""
    return sha256((model_digest + code_digest + files_digest).encode())[:16]


def manifest(model, code: dict[str, bytes], rendered: dict[str, bytes]) -> dict:
    m, c, f = model_hash(model), code_hash(code), code_hash(rendered)
    return {
        "version": version_of(m, c, f),
        "model_hash": m,
        "code_hash": c,
        "files_hash": f,
        "hal_provision": __version__,
        "nodes": list(model.deploy_pull_nodes),
        "points": {p.host: [h for h in p.serves if h in model.deploy_pull_nodes] for p in model.deploy_points},
        "files": {path: sha256(data) for path, data in sorted({**code, **rendered}.items())},
    }


def dumps(data: dict) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def _directories(paths) -> list[str]:
    dirs = set()
    for path in paths:
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(dirs)


def archive(members: dict[str, bytes], executable: frozenset[str] = frozenset()) -> bytes:
    """The members as a deterministic tar.gz (directories too, every entry sorted by path)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        entries = [(d, None) for d in _directories(members)] + [(p, members[p]) for p in members]
        for path, data in sorted(entries, key=lambda e: e[0]):
            info = tarfile.TarInfo(path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755 if path in executable else 0o644
                tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


class Bundle:
    """A built bundle: what `hal-provision bundle` writes into DIR."""

    def __init__(self, version: str, tarball: bytes, manifest: dict):
        self.version, self.tarball, self.manifest = version, tarball, manifest

    def outputs(self) -> dict[str, bytes]:
        """File name in DIR -> content: <version>.tar.gz, <version>.json, and current.json as
        the fields of the release, unsigned (hal_provision/release.py signs it: a node takes
        only a signed one)."""
        name = f"{self.version}.tar.gz"
        current = {"version": self.version, "bundle": name, "sha256": sha256(self.tarball), "size": len(self.tarball)}
        return {name: self.tarball, f"{self.version}.json": dumps(self.manifest), "current.json": dumps(current)}


def build(model, files: dict[str, str], repo: Path = REPO) -> Bundle:
    """The bundle of `model` (in pull mode) and its rendered tree `files` (render_all)."""
    code = code_members(repo)
    rendered = rendered_members(files, static_inventory(list_inventory(tree_documents(files))))
    m = manifest(model, code, rendered)
    members = {**code, **rendered, MANIFEST: dumps(m)}
    executable = frozenset(p for p in code if p == f"{TOP}/hal_provision/node/converge.py")
    return Bundle(m["version"], archive(members, executable), m)
