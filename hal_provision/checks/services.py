"""Checks: services."""
