"""Spectrum Scale (GPFS) rules on the controller: the tuning the model asks for and the mmchconfig
plan that reaches it from `mmlsconfig -Y` (gpfs.py); also the DL-style fio benchmark (bench.py).
"""
