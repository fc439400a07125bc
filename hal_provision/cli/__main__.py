"""`python -m hal_provision.cli ...`: the same as the `hal-provision` console script."""

from .main import main

main()
