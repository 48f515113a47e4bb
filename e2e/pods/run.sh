#!/usr/bin/env bash
# The real-pod suite end to end: the project's image (e2e/image/build.sh,
# unless OZONE_E2E_SKIP_BUILD=1) and the JVM image (e2e/image/hbase.sh), a
# cluster of real nodes with both imported (e2e/nodes/up.sh), and
# e2e/pods/suite.sh inside it. Ends with the suite's `N passed, N failed`.
set -euo pipefail
cd "$(dirname "$0")/../.."
source e2e/image/podman.sh
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
export OZONE_IMAGE=${OZONE_IMAGE:-ghcr.io/ozone-rs/ozone:$version}
if [ -z "${OZONE_E2E_SKIP_BUILD:-}" ]; then bash e2e/image/build.sh; fi
HBASE_IMAGE=$(bash e2e/image/hbase.sh)
export HBASE_IMAGE
export NODES_IMAGES="$OZONE_IMAGE $HBASE_IMAGE"
exec bash e2e/nodes/up.sh bash e2e/pods/suite.sh
