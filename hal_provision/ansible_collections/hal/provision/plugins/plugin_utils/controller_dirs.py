# -*- coding: utf-8 -*-
"""The controller's directories that ssh needs before its first connection, made by the run
that needs them.

ansible.cfg names an SSH ControlPath in ssh_args (so that synchronize's rsync shares each node's
master connection). Ansible's ssh connection makes its control_path_dir only when it writes the
ControlPath itself, and Mitogen's ssh makes none: on a machine that never ran Ansible, the
first task then fails on every host with "unix_listener: cannot bind to path ...: No such file
or directory". The strategy (ansible.cfg's, hal.provision.mitogen_linear) calls
`ensure_control_dirs` before the first task, so no run depends on what an earlier one left.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex

# ssh's own expansions in a ControlPath (ssh_config(5), TOKENS and ENVIRONMENT VARIABLES):
# ${VAR} from the environment, a leading ~ and %d for the user's home directory.
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def ssh_control_path(ssh_args: str) -> str | None:
    """The ControlPath an ssh_args string sets (the first: ssh keeps an option's first value),
    or None."""
    words = shlex.split(ssh_args or "")
    for i, word in enumerate(words):
        if word == "-o" and i + 1 < len(words):
            option = words[i + 1]
        elif word.startswith("-o") and len(word) > 2:
            option = word[2:]
        else:
            continue
        key, _, value = option.partition("=")
        if key.strip().lower() == "controlpath":
            return value.strip()  # the first: ssh keeps an option's first value
    return None


def _expand_env(text: str, environ) -> str:
    return _ENV.sub(lambda m: environ.get(m.group(1), ""), text)


def ssh_home() -> str:
    """The home directory ssh expands ~ and %d to: the user's passwd entry (not $HOME)."""
    return pwd.getpwuid(os.getuid()).pw_dir


def control_dir(control_path: str, environ=None) -> str | None:
    """The directory ssh will bind a ControlPath's socket in, expanded as ssh expands it; None
    where ssh makes no socket (none, or a directory left to per-connection tokens)."""
    environ = os.environ if environ is None else environ
    if not control_path or control_path.lower() == "none":
        return None
    path = _expand_env(control_path, environ)
    if path == "~" or path.startswith("~/"):
        path = ssh_home() + path[1:]
    parent = os.path.dirname(path.replace("%d", ssh_home()))
    if not parent or re.search(r"%[^%]", parent):  # a directory that varies per connection
        return None
    return parent.replace("%%", "%")


def ensure_dir(path: str) -> str:
    """Make PATH (and its parents) with mode 0700 where missing; an existing one is left as is."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def ensure_control_dirs(ssh_args: str | None, control_path_dir: str | None, environ=None) -> list[str]:
    """Make the directory of ssh_args' ControlPath and Ansible's control_path_dir (expanded as
    Ansible expands it); the directories, in that order."""
    environ = os.environ if environ is None else environ
    made = []
    directory = control_dir(ssh_control_path(ssh_args or ""), environ)
    if directory:
        made.append(ensure_dir(directory))
    if control_path_dir:
        path = _expand_env(control_path_dir, environ)
        if path == "~" or path.startswith("~/"):  # Ansible expands ~ from $HOME
            path = environ.get("HOME", ssh_home()) + path[1:]
        made.append(ensure_dir(path))
    return made


def ensure_from_ansible_config() -> list[str]:
    """ensure_control_dirs with the ssh connection's settings as this run's Ansible sees them
    (ansible.cfg, ANSIBLE_SSH_ARGS, ANSIBLE_SSH_CONTROL_PATH_DIR)."""
    from ansible import constants as C
    from ansible.plugins.loader import connection_loader

    connection_loader.get("ansible.builtin.ssh", class_only=True)  # registers its settings

    def setting(name):
        try:
            return C.config.get_config_value(name, plugin_type="connection", plugin_name="ssh")
        except Exception:  # an unreadable setting is Ansible's to report when it connects
            return None

    return ensure_control_dirs(setting("ssh_args"), setting("control_path_dir"))
