"""Nodes' baseboard management controllers, from the controller: the credentials a group's `bmc`
refers to (`credentials.py`), the two protocols (`redfish.py` through sushy, `ipmi.py` through
ipmitool) and `hal-provision power`'s orchestration over a hostlist (`power.py`). Nothing here
imports the command line; `cli/power.py` prints what `power.py` returns, and `reimage` calls
`power.set_next_boot_network` and `power.run`."""

from __future__ import annotations


class BmcError(RuntimeError):
    """A BMC that did not do what was asked, or could not be asked: the message says why, in
    words an admin can act on (wrong password, connection refused, no such system)."""
