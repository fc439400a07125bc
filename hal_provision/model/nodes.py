"""Node groups: hosts named by a hostlist expression, a role (and maybe more) and, where the
nodes run jobs, one hardware profile."""

from __future__ import annotations

from enum import Enum
from ipaddress import IPv4Address

from pydantic import Field, model_validator

from .base import AbsolutePath, Hostlist, Name, Strict
from .bmc import Bmc, Mac
from .sharing import GpuSharing


class Role(str, Enum):
    login = "login"
    management = "management"
    storage = "storage"
    data_transfer = "data_transfer"
    development = "development"
    compute = "compute"


# Roles whose nodes need a hardware profile: compute nodes run slurmd (node lines, GRES, the
# wrapper suite's shapes, the health check), development nodes are where users try GPU code.
HARDWARE_ROLES = (Role.compute, Role.development)


class NodeGroup(Strict):
    name: Name = Field(
        description="Group name (unique); becomes part of Ansible group names. Placements (services, "
        "partitions, storage clients, ...) name the group's hosts as @NAME."
    )
    role: Role = Field(description="What the nodes are for.")
    also: list[Role] = Field(
        default_factory=list,
        description="Further roles the same nodes play, e.g. a deskside GPU server that is the login node, the "
        "Slurm controller and the compute node at once: role compute, also [login, management]. Each role's "
        "services, groups and checks then apply to these nodes.",
    )
    hosts: Hostlist = Field(
        description="Host names as a hostlist expression, e.g. hal[01-16]; no @ references here "
        "(this is what they resolve to)."
    )
    count: int | None = Field(None, ge=1, description="Expected number of hosts; a check compares it with `hosts`.")
    hardware: Name | None = Field(
        None,
        description="Key of a profile under `hardware`. Required where the nodes run jobs or GPU work (role or "
        "`also` compute or development: Slurm's node lines, the wrapper suite and the health check are made "
        "from it); optional for login, management, storage and data_transfer nodes.",
    )
    addresses: dict[str, IPv4Address] = Field(
        default_factory=dict,
        description="Per network name: the first host's address; following hosts (in hostlist "
        "order) take consecutive addresses.",
    )
    features: list[Name] = Field(default_factory=list, description="Extra Slurm node features for these nodes.")
    job_tmp_base: AbsolutePath | None = Field(
        None,
        description="Where Slurm makes each job's private /tmp and /dev/shm on these nodes (job_container/tmpfs "
        "BasePath; removed when the job ends). Put it on the profile's local scratch (hardware.*.scratch); "
        "None: jobs share the node's /tmp.",
    )
    gpu_sharing: GpuSharing | None = Field(
        None,
        description="How small jobs share these compute nodes' GPUs: Slurm shards of whole GPUs "
        "(shards_per_gpu), CUDA MPS shares of whole GPUs (mps_per_gpu) or MIG instances as GPU types (mig). "
        "None: a job takes whole GPUs.",
    )
    image: Name | None = Field(
        None,
        description="Key of an image under `provisioning.images`: these nodes boot it from the network "
        "(`boot_macs` says which interface). None: the nodes' OS is installed by other means.",
    )
    boot_macs: dict[str, Mac] = Field(
        default_factory=dict,
        description="Per host of the group: the MAC of the interface it boots from (on `provisioning.network`), "
        "as `discover` or the vendor's sheet gives it. The boot server answers these MACs only.",
    )
    bmc: Bmc | None = Field(
        None,
        description="How to reach these nodes' BMCs (power, boot device): Redfish or IPMI, at each node's address "
        "on the BMC network or behind one `endpoint`; credentials by reference only.",
    )
    description: str = Field("", description="Free text.")

    @model_validator(mode="after")
    def _hardware_where_needed(self) -> "NodeGroup":
        if self.hardware is None and self.has(*HARDWARE_ROLES):
            needing = [r.value for r in self.roles if r in HARDWARE_ROLES]
            raise ValueError(
                f"node group {self.name!r} has no `hardware`: {' and '.join(needing)} nodes need a "
                "profile (slurm.conf's node lines, the wrapper suite and the health check come "
                "from it); name one under `hardware`"
            )
        return self

    @property
    def roles(self) -> tuple[Role, ...]:
        """The role, then the further ones, each once."""
        return tuple(dict.fromkeys((self.role, *self.also)))

    def has(self, *roles: Role) -> bool:
        """Whether these nodes play any of `roles`."""
        return any(r in self.roles for r in roles)
