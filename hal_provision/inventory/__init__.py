"""The rendered Ansible inventory, read once: `documents` parses its files as Ansible's yaml
plugin reads the directory, `groups` builds the one group tree (hosts, children, merged
variables, the `ansible-inventory --list` listing) that the bundle, the plan and the CLI ask,
and `source` serves the parsed documents to the `hal.provision.cluster` inventory plugin.

Kept empty of imports: the plugin imports `hal_provision.inventory.source` on every Ansible run.
"""
