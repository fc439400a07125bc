"""Storage logic that is neither a check nor a renderer: the GPFS tuning plan (what mmchconfig
must change, and which changes need a daemon restart), the DL-style fio benchmark and the
responsiveness probe. Pure functions over the model and over command output; the CLI and the
gpfs role's action plugin call them.
"""
