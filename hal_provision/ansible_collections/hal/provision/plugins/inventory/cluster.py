# hal-provision: the cluster description (cluster.yml) as an Ansible inventory source.
# Apache-2.0, like the rest of hal-provision.

from __future__ import annotations

DOCUMENTATION = r"""
name: cluster
short_description: A hal-provision cluster description (cluster.yml) as an inventory
description:
  - >-
    Reads a hal-provision cluster description, checks it, and gives Ansible exactly the groups
    and variables that C(hal-provision render) writes to C(inventory/hosts.yml) and
    C(inventory/storage.yml), without a rendered inventory on disk. The plugin renders those
    two files in memory with hal-provision's own renderers and reads them as the yaml plugin
    reads a rendered inventory directory, so the two cannot disagree.
  - >-
    A description with errors fails to parse, its message listing every error as
    C(file:line:column: error: path: message); warnings are shown as Ansible warnings on every
    run. Ansible then goes on without the source unless
    C(ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED=1) (C([inventory] any_unparsed_is_failed)).
  - >-
    Results are cached per user while the description (path, size, modification time) and the
    hal_provision code are unchanged; C(--flush-cache) and C(meta refresh_inventory) rebuild.
  - >-
    Needs the hal_provision package importable by Ansible's Python (the same virtual
    environment). The source is a YAML file (any name ending in .yml or .yaml) whose
    C(plugin) key names this plugin; the C(auto) inventory plugin, enabled by default, loads it.
options:
  plugin:
    description: Marks the file as a source for this plugin.
    required: true
    choices: ["hal.provision.cluster"]
  cluster_file:
    description:
      - >-
        The cluster description. A relative path is relative to the directory of this source
        file. Unset, the embedded HAL description (as the hal-provision commands without FILE).
    type: str
  rendered_dir:
    description:
      - >-
        The directory of the rendered files on the controller (C(DIR/files) after
        C(hal-provision render FILE -o DIR)); every host gets it as C(hal_rendered_dir). A
        relative path is relative to the directory of this source file and is made absolute.
      - >-
        Unset, C(hal_rendered_dir) is the rendered inventory's own value,
        C({{ inventory_dir }}/../files), where C(inventory_dir) is the directory of this source
        file. A source file placed in C(DIR/inventory/) instead of C(hosts.yml) needs no
        rendered_dir.
      - >-
        A value holding a template (C({{ ... }})) is kept as it is and evaluated where it is used,
        for instance C({{ lookup('ansible.builtin.env', 'RENDERED') }}/files).
    type: str
  model_cache:
    description: Keep the parsed inventory between runs (see model_cache_dir).
    type: bool
    default: true
    env:
      - name: HAL_INVENTORY_CACHE
  model_cache_dir:
    description:
      - >-
        The cache's directory. Unset, C($XDG_CACHE_HOME/hal-provision/inventory), else
        C(~/.cache/hal-provision/inventory). One entry per description is kept.
    type: str
    env:
      - name: HAL_INVENTORY_CACHE_DIR
"""

EXAMPLES = r"""
# inventory/hal.yml: the embedded HAL description, with the files `hal-provision render
# inventory/hal/cluster.yml -o rendered/hal` wrote. Then:
#   ansible-playbook -i inventory/hal.yml playbooks/site.yml
plugin: hal.provision.cluster
cluster_file: hal/cluster.yml
rendered_dir: ../rendered/hal/files
"""

import os
import sys

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin

try:  # ansible-core >= 2.19 (data tagging)
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - older releases trust inventory strings anyway
    trust_as_template = None

YAML_EXTENSIONS = (".yml", ".yaml")
RENDERED_DIR_VAR = "hal_rendered_dir"


class InventoryModule(BaseInventoryPlugin):
    NAME = "hal.provision.cluster"
    # Trusted as the rendered YAML is (ansible-core >= 2.19 marks a plugin's strings unsafe
    # otherwise): the description is the admin's own file, and hal_rendered_dir's default is a
    # template.
    trusted_by_default = True

    def verify_file(self, path):
        return super().verify_file(path) and path.endswith(YAML_EXTENSIONS)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        config = self._read_config_data(path)
        unknown = sorted(set(config) - set(self._options) - {"plugin"})
        if unknown:  # Ansible ignores them; a misspelt cluster_file would silently mean HAL
            import difflib

            hints = [
                f"{key!r}"
                + "".join(f" (did you mean {m!r}?)" for m in difflib.get_close_matches(key, list(self._options), 1))
                for key in unknown
            ]
            raise AnsibleParserError(f"{path}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}")
        try:
            from hal_provision.inventory import source as cluster_source
        except ImportError as exc:
            raise AnsibleParserError(
                f"the hal.provision.cluster inventory plugin needs the hal_provision package in "
                f"Ansible's Python ({sys.executable}): {exc}"
            ) from None
        here = os.path.dirname(os.path.abspath(path))
        cluster_file = self.get_option("cluster_file")
        if cluster_file:
            cluster_file = os.path.join(here, os.path.expanduser(str(cluster_file)))
        else:
            from hal_provision.loader import default_path

            cluster_file = str(default_path())
        use_cache = bool(self.get_option("model_cache"))
        cache_dir = self.get_option("model_cache_dir")
        try:
            data = cluster_source.load(
                cluster_file,
                cache_dir=os.path.expanduser(str(cache_dir)) if cache_dir else None,
                use_cache=use_cache and cache,  # cache=False: --flush-cache, refresh_inventory
                write_cache=use_cache,
            )
        except cluster_source.InvalidCluster as exc:
            raise AnsibleParserError(str(exc)) from None
        for warning in data.warnings:
            self.display.warning(warning)
        self.display.vvv(f"hal.provision.cluster: {cluster_file} {'from the cache' if data.cached else 'loaded'}")
        self._populate(data.documents, self._rendered_dir(here))

    def _rendered_dir(self, here):
        value = self.get_option("rendered_dir")
        if not value:
            return None  # keep the rendered inventory's own template
        if "{{" in value:
            return value  # a template, evaluated where it is used (trusted, as the file is)
        return os.path.normpath(os.path.join(here, os.path.expanduser(str(value))))

    # Ansible's yaml plugin, for the documents a rendered inventory directory holds: the same
    # calls in the same order, so groups, members and variables come out identical.
    def _populate(self, documents, rendered_dir):
        inventory, copy = self.inventory, _identity
        if trust_as_template is not None and hasattr(inventory, "__wrapped__"):
            # Ansible's inventory wrapper copies and trusts every value through a generic
            # visitor, about a third of this plugin's time at 10,000 hosts: do the same here
            # for plain data (str, dict, list, scalars) and talk to the inventory directly.
            inventory, copy = inventory.__wrapped__, _trusted
        for document in documents:
            for group, group_data in document.items():
                self._group(inventory, copy, group, group_data, rendered_dir)

    def _group(self, inventory, copy, group, group_data, rendered_dir):
        group = inventory.add_group(group)
        if not group_data:
            return group
        for key, section in group_data.items():
            if not section:
                continue
            if key == "vars":
                for name, value in section.items():
                    if name == RENDERED_DIR_VAR:
                        value = rendered_dir or value
                    inventory.set_variable(group, name, copy(value))
            elif key == "children":
                for child, child_data in section.items():
                    inventory.add_child(group, self._group(inventory, copy, child, child_data, rendered_dir))
            elif key == "hosts":
                for pattern, host_vars in section.items():
                    hosts, port = self._expand_hostpattern(pattern) if _is_pattern(pattern) else ([pattern], None)
                    for host in hosts:
                        inventory.add_host(host, group=group, port=port)
                        if host_vars:
                            for name, value in host_vars.items():
                                inventory.set_variable(host, name, copy(value))
        return group


def _is_pattern(name):
    return not isinstance(name, str) or "[" in name or ":" in name


def _identity(value):
    return value


def _trusted(value):
    """A copy of plain data with every string trusted as a template, as the rendered YAML's are."""
    kind = type(value)
    if kind is str:
        return trust_as_template(value)
    if kind is dict:
        return {key: _trusted(item) for key, item in value.items()}
    if kind is list:
        return [_trusted(item) for item in value]
    return value
