#!/usr/bin/env bash
# The JVM read benchmark (docs/PERFORMANCE.md): 64 KiB random positional
# reads, 16 threads, through the ozrs jar (pass-through verify off and on,
# through the sidecar) beside raw Java FileChannel pread of the same block
# files and pread + CRC32C, interleaved in one run, on a local cluster of its
# own started from target/release/ozone (built here when missing).
#
#   bash hadoop-fs/bench.sh [--json FILE]
#   BENCH_OPTS="-Dbench.files=8 -Dbench.rounds=3" bash hadoop-fs/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
json=""
if [ "${1:-}" = --json ]; then json=$(realpath -m "$2"); fi
cargo build -q --release --locked --bin ozone
export OZONE_BIN=$PWD/target/release/ozone
cd hadoop-fs
mvn -B -q -ntp test-compile
mvn -B -q -ntp dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile=target/bench.cp
java -Xmx2g ${BENCH_OPTS:-} ${json:+-Dbench.json=$json} \
  -cp "target/test-classes:target/classes:$(cat target/bench.cp)" io.ozoners.hadoop.fs.JvmReadBench
