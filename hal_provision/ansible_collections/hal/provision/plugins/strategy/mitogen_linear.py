# -*- coding: utf-8 -*-
"""Ansible's linear strategy run through Mitogen when Mitogen is installed (the sandbox extra
installs it); plain linear otherwise.

Mitogen keeps one Python interpreter per node for the whole run and sends modules to it
instead of starting Python and importing each module afresh for every task: the same tasks,
results and handlers, at about half the controller and node CPU per task (bench/converge.py).

Either way the strategy first makes the directories ssh binds its control sockets in
(plugin_utils/controller_dirs.py): neither Mitogen nor Ansible's ssh makes the one ansible.cfg's
ssh_args name, and a machine that never ran Ansible has none.

Mitogen's CPU affinity policy is switched off. It pins its multiplexer to CPU 0 and, on a
machine of fewer than four CPUs, the controller, its workers and every command they start
(ssh, `podman run`, `hal-provision sandbox up`) to the CPUs left: on two, everything on CPU 1,
and the containers a play starts inherit that for good. A 2-core machine running the sandbox
then used one core, however much was waiting (run queue 12-18, the other CPU idle).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: mitogen_linear
short_description: Ansible's linear strategy, through Mitogen when it is installed
description:
  - Runs every task on every host in lock-step as the linear strategy does; when the Python
    package mitogen is importable, its connection multiplexer carries the modules.
  - Without mitogen it is Ansible's own linear strategy, unchanged.
  - Before the first task it makes the directory of the ControlPath in the ssh connection's
    ssh_args and the ssh connection's control_path_dir (mode 0700) where they are missing.
author: hal-provision
"""

from ansible_collections.hal.provision.plugins.plugin_utils.controller_dirs import ensure_from_ansible_config

try:
    import ansible_mitogen.affinity
    import ansible_mitogen.loaders
    import ansible_mitogen.strategy
except ImportError:  # no Mitogen: Ansible's own linear strategy
    from ansible.plugins.strategy.linear import StrategyModule as _Strategy
else:
    # The base Policy pins nothing (its assign_* methods do nothing); Mitogen looks the policy
    # up on the module each time, before it starts its multiplexer and workers.
    ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()
    _Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)

    class _Strategy(ansible_mitogen.strategy.StrategyMixin, _Linear):
        """Ansible's linear strategy with Mitogen's connection and action plugins."""


class StrategyModule(_Strategy):
    """The linear strategy (through Mitogen where installed), after making ssh's directories."""

    def run(self, iterator, play_context):
        ensure_from_ansible_config()
        return super().run(iterator, play_context)
