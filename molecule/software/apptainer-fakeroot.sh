#!/usr/bin/env bash
# Apptainer really running `exec --fakeroot` as a normal user with the rendered apptainer.conf,
# /etc/subuid and /etc/subgid. Not part of the molecule sequence: Apptainer is not installable
# on Debian 12, so this upgrades a throwaway privileged container to Debian sid (apptainer
# 1.4.x there needs libc6 >= 2.38), which takes a few minutes and a few hundred MB.
#   bash molecule/software/apptainer-fakeroot.sh        # from the repository root
set -euo pipefail
cd "$(dirname "$0")/../.."
name=mol-sw-apptainer
work=$(mktemp -d)
trap 'podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

hal-provision render molecule/software/cluster.yml -o "$work/rendered" >/dev/null
files="$work/rendered/files"
podman rm -f "$name" >/dev/null 2>&1 || true
# Apptainer needs a privileged container here (as root it lacks CAP_SYS_RESOURCE anyway).
podman run -d --privileged --name "$name" localhost/hal-node:bookworm sleep 3600 >/dev/null
# The host's own Debian mirror (its apt sources), with the sid suite.
mirror=$(python3 -m hal_provision.sandbox.image --print-mirror)
podman exec -e MIRROR="$mirror" "$name" sh -c 'rm -f /etc/apt/sources.list.d/*
  echo "deb $MIRROR sid main" > /etc/apt/sources.list
  apt-get -q -o Acquire::Check-Valid-Until=false update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Acquire::Check-Valid-Until=false install \
    --no-install-recommends apptainer busybox-static uidmap >/dev/null
  useradd -m -u 3001 -s /bin/bash haltest'
# After useradd, which appends ranges of its own: the rendered files replace them, as the role does.
for f in etc/apptainer/apptainer.conf etc/subuid etc/subgid; do podman cp "$files/$f" "$name:/$f"; done
first=$(awk -F: '$1 == "haltest" {print $2}' "$files/etc/subuid")
out=$(podman exec "$name" sh -c '
  chown root:root /etc/subuid /etc/subgid /etc/apptainer/apptainer.conf
  r=/srv/rootfs; mkdir -p $r/bin $r/etc $r/tmp $r/proc $r/sys $r/dev $r/home
  cp /bin/busybox $r/bin/; for c in sh id cat touch chown stat; do ln -sf busybox $r/bin/$c; done
  echo "root:x:0:0:root:/root:/bin/sh" > $r/etc/passwd; echo "root:x:0:" > $r/etc/group; chmod -R a+rX $r
  su - haltest -c "apptainer exec --fakeroot /srv/rootfs /bin/sh -c \"id -u; cat /proc/self/uid_map; touch /tmp/f; chown 1000:1000 /tmp/f\"" 2>/dev/null
  stat -c "outside=%u" /tmp/f')
echo "$out"
grep -qx 0 <<<"$out" || { echo "FAIL: not root inside the container"; exit 1; }
grep -Eq "^ +1 +$first +65536$" <<<"$out" || { echo "FAIL: IDs 1-65535 not mapped onto $first"; exit 1; }
grep -qx "outside=$((first + 999))" <<<"$out" || { echo "FAIL: uid 1000 inside is not $((first + 999)) outside"; exit 1; }
echo "apptainer-fakeroot: 1 passed, 0 failed"
