#!/usr/bin/env bash
# Regenerates the image's lock files with hashes (pip-tools' pip-compile, in a throwaway venv of its own):
#   deploy/image/requirements.lock        the runtime dependencies of pyproject.toml, every transitive one pinned
#   deploy/image/build-requirements.lock  hatchling (the build backend), to build the wheel in the image
# Run from anywhere with the image's Python minor (3.11, as the Containerfile's base): markers are evaluated
# for the Python that runs pip-compile. Every file of each pinned version on the index gets its hash, so the
# lock installs on every architecture the index has wheels for. tests/unit/test_image_lock.py checks that the
# lock covers pyproject's dependencies.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3.11}
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
"$python" -m venv "$tools/venv"
"$tools/venv/bin/pip" install -q pip-tools
# Local wheel folders (PIP_FIND_LINKS) would put hashes of local files in the lock: the index only.
compile=("$tools/venv/bin/pip-compile" --quiet --generate-hashes --strip-extras --allow-unsafe --no-emit-find-links)
cd "$root"
PIP_FIND_LINKS= CUSTOM_COMPILE_COMMAND="deploy/image/lock.sh" \
  "${compile[@]}" --output-file deploy/image/requirements.lock pyproject.toml
PIP_FIND_LINKS= CUSTOM_COMPILE_COMMAND="deploy/image/lock.sh" \
  "${compile[@]}" --output-file deploy/image/build-requirements.lock deploy/image/requirements.in
