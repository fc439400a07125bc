"""Checks: hardware."""
