"""The command line: every `hal-provision` command (main.py, one module per sub-command), their
shared helpers (common.py, validate.py) and the one Ansible runner (runner.py).

Kept empty on purpose: `hal-provision validate` and the inventory plugin import only what they use.
"""
