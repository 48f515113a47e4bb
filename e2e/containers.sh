#!/usr/bin/env bash
# The container end-to-end: the image (built here by e2e/image/build.sh)
# run as the pods the operator renders, laid out like Kubernetes nodes on
# this machine with podman. Prints `N passed, N failed`; exits non-zero on a
# failure. Installs podman, runc and debootstrap when missing.
#
#   bash e2e/containers.sh          # builds the image, then runs the steps
#   OZONE_E2E_SKIP_BUILD=1 bash e2e/containers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/image/podman.sh
source e2e/tools.sh
ensure_podman
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
export OZONE_IMAGE=${OZONE_IMAGE:-ghcr.io/ozone-rs/ozone:$version}
if [ -z "${OZONE_E2E_SKIP_BUILD:-}" ]; then
  bash e2e/image/build.sh
fi
exec "$E2E_BIN/python" e2e/containers.py
