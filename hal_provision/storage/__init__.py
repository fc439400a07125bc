"""Spectrum Scale (GPFS) rules on the controller: the tuning the model asks for and the mmchconfig
plan that reaches it from `mmlsconfig -Y` (gpfs.py; the gpfs role's action plugin runs it too).
"""
