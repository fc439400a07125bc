"""Checks: network."""
