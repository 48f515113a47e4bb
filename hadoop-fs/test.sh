#!/usr/bin/env bash
# Builds the Hadoop FileSystem jar (target/ozone-hadoop-fs.jar) and runs its
# tests: Hadoop's own FileSystem contract tests and the JVM process tests,
# against one real local cluster (`ozone local up`, from the workspace's
# target/debug/ozone, built here when missing). Maven and a JDK (11+) are the
# machine's; every artifact comes from Maven Central.
#
#   bash hadoop-fs/test.sh               # package + every test
#   bash hadoop-fs/test.sh -Dtest=TestJvmReads
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mvn > /dev/null; then
  echo "installing maven"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven > /dev/null
fi
if [ -z "${OZONE_BIN:-}" ]; then
  cargo build -q --locked --bin ozone
  export OZONE_BIN=$PWD/target/debug/ozone
fi
cd hadoop-fs
mvn -B -ntp package "$@"
ls -l target/ozone-hadoop-fs.jar
