# hal-provision: the filters playbooks/compose.yml computes its moves with.
# Apache-2.0, like the rest of hal-provision.

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from hal_provision.compose.moves import ComposeError, driver_argv, moves


def compose_moves(listed, config, layout):
    """The `list` answers of every pool -> the detaches and attaches that reach LAYOUT."""
    try:
        return moves(config, layout, listed)
    except ComposeError as e:
        raise AnsibleFilterError(str(e)) from None


class FilterModule:
    def filters(self):
        return {"compose_driver_argv": driver_argv, "compose_moves": compose_moves}
