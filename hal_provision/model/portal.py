"""The web portal: a front end (JupyterHub, or Open OnDemand where a site runs it) that logs
users in against the cluster directory and starts interactive applications as Slurm jobs.

One catalogue serves both front ends: every app names what it runs (Jupyter Notebook,
JupyterLab, TensorBoard, H2O), the modules or the container it starts in, and the wrapper
suite's virtual partitions it offers, so a portal session asks Slurm exactly what
`swbatch -p <virtual partition>` would. No secret lives here: the hub's cookie secret and
proxy token are generated on the portal node; its TLS key comes from the cluster CA (made on
the node) or from the site.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import AbsolutePath, CleanPath, Name, Strict
from .software import ModuleRef

APP_KINDS = ("jupyter_notebook", "jupyterlab", "tensorboard", "h2o")


class PortalApp(Strict):
    name: Name = Field(description="Short name: the form's value, the Open OnDemand app directory.")
    kind: Literal["jupyter_notebook", "jupyterlab", "tensorboard", "h2o"] = Field(
        description="What the session runs: jupyter_notebook (classic Notebook UI), jupyterlab, tensorboard "
        "(in a JupyterLab session, opened at /proxy), h2o (H2O-3 Flow, in a JupyterLab session)."
    )
    title: str = Field(min_length=1, description="What the portal's menu shows.")
    description: str = Field("", description="One line under the title.")
    modules: list[ModuleRef] = Field(
        default_factory=list,
        description="software.modules loaded (in order) before the app starts, e.g. [jupyter]; "
        "they must be visible on compute nodes.",
    )
    container: AbsolutePath | None = Field(
        None,
        description="A Singularity/Apptainer image the app runs in (singularity exec --nv when the "
        "virtual partition has GPUs); the image must contain Jupyter.",
    )
    virtual_partitions: list[Name] = Field(
        min_length=1, description="swsuite virtual partitions offered (one node each), e.g. [gpux1, cpun1]."
    )
    max_hours: int | None = Field(
        None, gt=0, description="Longest session; None: each virtual partition's max_time_hours."
    )
    default_hours: int = Field(1, gt=0, description="The form's preset number of hours.")
    tensorboard_logdir: CleanPath = Field(
        "~/tensorboard", description="kind tensorboard: the log directory TensorBoard reads (~ is the home)."
    )


class PortalTls(Strict):
    certificate: AbsolutePath | None = Field(
        None,
        description="Site certificate (PEM, chain included) on the portal node; None: one signed by the "
        "cluster CA (made by the ldap_server role) at deploy time.",
    )
    key: AbsolutePath | None = Field(None, description="Its private key on the portal node (root-only).")


DEFAULT_PACKAGES = [
    "jupyterlab>=4,<5",
    "notebook>=7,<8",
    "jupyter-server-proxy>=4,<5",
    "tensorboard>=2,<3",
    "h2o>=3.40,<4",
]


class UserEnvironment(Strict):
    module: ModuleRef = Field(
        description="The software.modules entry (NAME/VERSION) whose prefix, on the shared software tree, "
        "the portal role installs the session software into; apps load it."
    )
    python: AbsolutePath = Field("/usr/bin/python3", description="Python the environment's virtualenv is made from.")
    packages: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PACKAGES),
        description="pip requirements installed from PyPI beside jupyterhub and batchspawner (which match the "
        "hub's versions).",
    )


class Portal(Strict):
    front_end: Literal["jupyterhub", "open_ondemand"] = Field(
        "jupyterhub",
        description="What the portal role deploys: jupyterhub (JupyterHub, batchspawner, LDAP authenticator, "
        "installed from PyPI) or open_ondemand (installed from the vendor's repository). The files of both "
        "are rendered either way.",
    )
    auth: Literal["ldap"] = Field("ldap", description="Users log in with their directory password.")
    server_name: str | None = Field(
        None, description="Host name users type in the browser; None: the portal host's name in cluster.domain."
    )
    port: int = Field(443, ge=1, le=65535, description="HTTPS port of the portal.")
    tls: PortalTls = Field(default_factory=PortalTls, description="The portal's certificate.")
    start_timeout_seconds: int = Field(
        300,
        gt=0,
        description="How long a session may wait in the queue and start before the portal gives up (and "
        "cancels the job); batchspawner's start_timeout.",
    )
    idle_cull_minutes: int = Field(
        60, gt=0, description="A session without activity for this long is stopped (its Slurm job ends)."
    )
    sessions_per_user: int = Field(1, ge=1, le=16, description="Sessions a user may run at once.")
    prefix: AbsolutePath | None = Field(
        None,
        description="Where the portal's own software (the hub's virtualenv) lives on the portal node. "
        "Default: cluster.prefix/portal.",
    )
    jupyterhub_version: str = Field(
        "5.2.1",
        pattern=r"^[0-9]+(\.[0-9]+)*$",
        description="JupyterHub on the hub and jupyterhub-singleuser in the sessions (they must match).",
    )
    batchspawner_version: str = Field("1.3.0", pattern=r"^[0-9]+(\.[0-9]+)*$", description="batchspawner, likewise.")
    user_environment: UserEnvironment = Field(description="The session software, exposed as a module.")
    apps: list[PortalApp] = Field(min_length=1, description="The catalogue of interactive apps.")

    def app(self, name: str) -> PortalApp | None:
        return next((a for a in self.apps if a.name == name), None)
