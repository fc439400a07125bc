"""Checks: nodes."""
