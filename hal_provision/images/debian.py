"""Debian roots made here: the host's own archive (read from its apt sources, so nothing names a
package registry) and its sources copied into a root for the root's release. Shared by the
sandbox's node images and the network-boot images; standard library only."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

SUITE = "bookworm"  # the host's release, whose archive every root is made from


class ImageError(RuntimeError):
    """An image (a sandbox node's, a network-boot one) cannot be built: the message says why."""


def host_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The first Debian archive URI of the host's apt sources that carries the main suite."""
    candidates: list[str] = []
    for src in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        for stanza in src.read_text().split("\n\n"):
            fields = dict(
                (k.strip(), v.strip())
                for k, _, v in (ln.partition(":") for ln in stanza.splitlines() if ":" in ln and not ln.startswith("#"))
            )
            suites = fields.get("Suites", "").split()
            if any(
                s == SUITE or s.startswith(SUITE) and "security" not in s for s in suites
            ) and "security" not in fields.get("URIs", ""):
                candidates.extend(fields.get("URIs", "").split())
    lists = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for lst in lists:
        if lst.is_file():
            for ln in lst.read_text().splitlines():
                m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", ln.strip())
                if m and m.group(2) == SUITE and "security" not in m.group(1):
                    candidates.append(m.group(1))
    if not candidates:
        raise ImageError(f"no Debian '{SUITE}' archive found in the host's apt sources under {etc_apt}")
    return candidates[0]


def apt_sources_for(text: str, release: str) -> str:
    """The host's apt sources (one-line or deb822) for another release of the same archives:
    each suite word bookworm (bookworm-updates, bookworm-security, ...) becomes `release`."""
    return re.sub(rf"(?<![\w.-]){SUITE}(?=(-[a-z]+)?(\s|$))", release, text)


def copy_apt_sources(root: Path, release: str) -> None:
    """The root (a container's or an image's) uses the same archives as the host, for its own release."""
    for rel in ("sources.list", "sources.list.d"):
        src = Path("/etc/apt") / rel
        dst = root / "etc/apt" / rel
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
            files = [p for p in dst.rglob("*") if p.is_file()]
        elif src.is_file():
            shutil.copy2(src, dst)
            files = [dst]
        else:
            continue
        if release != SUITE:
            for f in files:
                f.write_text(apt_sources_for(f.read_text(), release))
