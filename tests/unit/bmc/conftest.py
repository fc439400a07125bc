"""The real BMCs of realbmc.py, as this directory's fixtures."""

from realbmc import ipmi, redfish  # noqa: F401
