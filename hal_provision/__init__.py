"""hal-provision: one YAML description of a HAL-class GPU cluster, validated, rendered, deployed."""

__version__ = "0.1.0"
