"""Checks: swsuite."""
