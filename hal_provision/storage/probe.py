"""The storage responsiveness probe now lives with the other collectors, in
hal_provision/monitoring/probe.py (the package the telegraf role installs on the nodes).

This name stays for `hal-provision storage probe` and older imports: it is the same module
object, not a copy, so `probe.__file__` names the file a node can run on its own.
"""

import sys

from ..monitoring import probe as _probe

sys.modules[__name__] = _probe
