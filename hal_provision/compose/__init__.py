"""Composable GPUs' drivers: the command contract a fabric manager sits behind
(`contract`), its command line (`driver`), the sandbox's podman driver (`sandbox`) and the
client of the REST API docs/composable-driver.md describes (`rest`). They run on the Ansible
controller, as a vendor's API client does: the fabric manager is remote. Standard library only."""
