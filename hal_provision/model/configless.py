"""Configless Slurm (slurm.configless): what slurmctld serves to a slurmd started with
--conf-server, per Slurm major, and when slurmd keeps asking for it.

Read from Slurm's own sources at each major's first release (the `slurmd_config_files` list:
src/slurmctld/proc_req.c up to 23.02, src/common/fetch_config.c from 23.11). A file added in a
later patch release of a major is left out, so the list holds for every release of it: 23.11
serves scrun.lua from a later 23.11 release, 25.05 topology.yaml from a later 25.05 release.
Not listed here, since the renderers write neither: slurmctld sends Prolog and Epilog scripts
named by a relative path from 23.11, and files slurm.conf includes by a bare name (`Include`).
Anything else a slurmd host needs (the munge key, HealthCheckProgram, absolute Prolog and
Epilog paths) is never served and stays the roles' to install.
"""

from __future__ import annotations

from .slurm import SLURM_VERSIONS, version_key

# The first major of each list, oldest first; a major uses the list of the latest entry at or
# before it.
_SERVED_FROM = (
    (
        "22.05",
        (
            "slurm.conf",
            "acct_gather.conf",
            "cgroup.conf",
            "cli_filter.lua",
            "ext_sensors.conf",
            "gres.conf",
            "helpers.conf",
            "job_container.conf",
            "knl_cray.conf",
            "mpi.conf",
            "oci.conf",
            "plugstack.conf",
            "topology.conf",
        ),
    ),
    # ext_sensors.conf and knl_cray.conf went with their plugins; scrun.lua came.
    (
        "24.05",
        (
            "slurm.conf",
            "acct_gather.conf",
            "cgroup.conf",
            "cli_filter.lua",
            "gres.conf",
            "helpers.conf",
            "job_container.conf",
            "mpi.conf",
            "oci.conf",
            "plugstack.conf",
            "scrun.lua",
            "topology.conf",
        ),
    ),
    (
        "25.11",
        (
            "slurm.conf",
            "acct_gather.conf",
            "cgroup.conf",
            "cli_filter.lua",
            "gres.conf",
            "helpers.conf",
            "job_container.conf",
            "mpi.conf",
            "namespace.yaml",
            "oci.conf",
            "plugstack.conf",
            "scrun.lua",
            "topology.conf",
            "topology.yaml",
        ),
    ),
)

# Before this major a slurmd whose --conf-server does not answer at its start exits (from it,
# it asks again every 10 s): the slurm role's unit drop-in restarts it instead.
SLURMD_RETRIES_FETCH_FROM = "24.05"


def served_to_slurmd(version: str) -> tuple[str, ...]:
    """The files (names in slurm.conf's directory) slurmctld of `version` sends a configless slurmd."""
    if version not in SLURM_VERSIONS:
        raise ValueError(f"unknown Slurm major {version!r}")
    return [files for first, files in _SERVED_FROM if version_key(first) <= version_key(version)][-1]
