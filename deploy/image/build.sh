#!/usr/bin/env bash
# `make image`: builds deploy/Containerfile with the first container engine that can build here: podman, then
# buildah, then docker (only when its daemon answers). None: one line saying so and exit 2, nothing built.
# IMAGE names the result (default metrics-sched:<pyproject version>); ENGINE forces one engine.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)
image=${IMAGE:-metrics-sched:${version:-dev}}

usable() {
  case "$1" in
    podman|buildah) command -v "$1" >/dev/null 2>&1 ;;
    # The docker CLI alone is not enough: it builds through a daemon.
    docker) command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 ;;
    *) return 1 ;;
  esac
}

engine=${ENGINE:-}
if [ -n "$engine" ]; then
  usable "$engine" || { echo "make image: ENGINE=$engine cannot build here (not installed, or no daemon)" >&2; exit 2; }
else
  for candidate in podman buildah docker; do
    if usable "$candidate"; then engine=$candidate; break; fi
  done
fi
if [ -z "$engine" ]; then
  echo "make image: no container engine that can build here (podman, buildah, or docker with a running daemon);" \
       "install one, or build deploy/Containerfile elsewhere (docs/deploying.md)" >&2
  exit 2
fi

echo "[image] $engine: building $image from deploy/Containerfile"
case "$engine" in
  buildah) buildah bud -f deploy/Containerfile -t "$image" . ;;
  *) "$engine" build -f deploy/Containerfile -t "$image" . ;;
esac
echo "[image] built $image: tag it for your registry and push it (docs/deploying.md, step 1)"
