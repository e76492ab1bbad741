#!/usr/bin/env bash
# What the cluster twin needs from the machine (`make twin`): Debian's podman, runc (crun refuses this
# machine's cgroups), debootstrap (the base image: no registry is reachable) and iproute2 (the pod network).
# Installs them with apt when missing; a tool that cannot be installed fails the run with one line.
set -euo pipefail
missing=()
for tool in podman runc debootstrap ip; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "make twin: ${missing[*]} missing; install Debian's podman runc debootstrap iproute2 as root (the twin runs rootful)" >&2
  exit 2
fi
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends podman runc debootstrap iproute2 uidmap >/dev/null; }; then
  echo "make twin: apt-get could not install podman, runc, debootstrap, iproute2: the twin cannot run" >&2
  exit 1
fi
