"""The unit tests' own fixtures (tests/conftest.py has the shared ones)."""

from __future__ import annotations

import os

import pytest

from hal_provision.release import KEYS_ENV


@pytest.fixture(scope="session", autouse=True)
def _release_keys_of_the_test_run(tmp_path_factory):
    """Any release key a unit test makes (`hal-provision bundle`, hal_provision.release) goes into
    the run's own temporary directory, never the user's ~/.config. Not for tests/infra: there the
    fleet scenario's tests sign with the key its enrolling push made, as an admin would."""
    before = os.environ.get(KEYS_ENV)
    os.environ[KEYS_ENV] = str(tmp_path_factory.mktemp("release-keys"))
    yield
    if before is None:
        os.environ.pop(KEYS_ENV, None)
    else:
        os.environ[KEYS_ENV] = before
