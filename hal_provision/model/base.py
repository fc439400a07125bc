"""Shared base for every model section."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..hostlist import HostlistError
from ..hostlist import check as check_hostlist


class Strict(BaseModel):
    """Unknown keys are errors everywhere: a typo must never be silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


def _check_hostlist(value: str) -> str:
    try:
        check_hostlist(value)
    except HostlistError as exc:
        raise ValueError(str(exc)) from None
    return value


Hostlist = Annotated[str, AfterValidator(_check_hostlist)]
"""A hostlist expression such as ``hal[01-16]`` or ``hal-mgmt1,hal-mgmt2``."""

Name = Annotated[str, AfterValidator(lambda v: _check_name(v))]


def _check_name(value: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", value):
        raise ValueError(f"{value!r} is not a valid name (start with a letter; letters, digits, '_' and '-')")
    return value


# The highest ID a user namespace can map (2**32 - 2; 2**32 - 1 is the kernel's "no ID").
MAX_ID = 2**32 - 2


def no_dot_segments(value: str) -> str:
    """A path names its place directly: a '.' or '..' segment could lead a rendered file, a
    mount or a prefix outside the directory it belongs in."""
    if any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"{value!r} has a '.' or '..' segment; write the path it means without them")
    return value


CleanPath = Annotated[str, AfterValidator(no_dot_segments)]
"""A path, absolute or relative (to a prefix, a home), without '.' or '..' segments."""


def absolute_path(pattern: str = r"^/[^\s:]*$"):
    """An absolute path matching `pattern`, without '.' or '..' segments."""
    return Annotated[CleanPath, Field(pattern=pattern)]


AbsolutePath = absolute_path()


class IdRange(Strict):
    first: int = Field(ge=0, le=MAX_ID, description="First ID of the range.")
    last: int = Field(ge=0, le=MAX_ID, description="Last ID of the range (inclusive).")
    description: str = Field("", description="Whose IDs these are, e.g. LDAP accounts.")

    def __contains__(self, value: int) -> bool:
        return self.first <= value <= self.last
