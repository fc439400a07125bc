"""The sandbox: a scaled-down HAL in podman containers on one machine, for trying and testing."""
