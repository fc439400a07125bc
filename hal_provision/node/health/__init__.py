"""Node health check (hal-healthcheck): the node compared with its rendered expectation.

healthcheck.py is installed on every Slurm node by the healthcheck role and run by slurmd as
HealthCheckProgram; it uses the Python standard library only.
"""
