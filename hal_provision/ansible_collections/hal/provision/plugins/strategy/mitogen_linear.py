# -*- coding: utf-8 -*-
"""Ansible's linear strategy run through Mitogen when Mitogen is installed (the sandbox extra
installs it); plain linear otherwise.

Mitogen keeps one Python interpreter per node for the whole run and sends modules to it
instead of starting Python and importing each module afresh for every task: the same tasks,
results and handlers, at about half the controller and node CPU per task (bench/converge.py).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: mitogen_linear
short_description: Ansible's linear strategy, through Mitogen when it is installed
description:
  - Runs every task on every host in lock-step as the linear strategy does; when the Python
    package mitogen is importable, its connection multiplexer carries the modules.
  - Without mitogen it is Ansible's own linear strategy, unchanged.
author: hal-provision
"""

try:
    import ansible_mitogen.loaders
    import ansible_mitogen.strategy
except ImportError:  # no Mitogen: Ansible's own linear strategy
    from ansible.plugins.strategy.linear import StrategyModule  # noqa: F401
else:
    _Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)

    class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):
        """Ansible's linear strategy with Mitogen's connection and action plugins."""
