#!/usr/bin/env bash
# The side-by-side JVM benchmark (docs/PERFORMANCE.md): one harness, the
# same workloads against each system, each system in a JVM of its own, one
# after the other in one run on this machine.
#
#   1. FsBench (64 KiB random positional reads with 16 threads; sequential
#      reads of every file, 1 GiB in all) on this project through the ozrs
#      jar (release build, `ozone local up --sidecars`, 3 datanodes):
#      short-circuit verify off and on, through the sidecar.
#   2. The same on HDFS 3.5.0 (MiniDFSCluster, 3 datanodes): the
#      path-based local reader and remote reads, verify off and on.
#   3. HBase 2.6.4 on this project (sidecar from the shipped HBase example)
#      and on HDFS (its local reader, as HBase on HDFS runs when
#      co-located), both clusters up side by side, taking turns round by
#      round (A B B A A B, HBASE_BENCH_ROUNDS rounds, 3, after an
#      unmeasured load on each): a load of
#      HBASE_BENCH_ROWS rows (200,000) into a fresh table of 8 regions, then
#      random gets (16 threads, every value checked) on that table, its
#      HFiles in the page cache and not in HBase's block cache.
#   4. HBase's WAL pattern (WalBench): 8 threads appending 1 KiB entries,
#      each followed by hflush, on both systems at once, the two taking
#      turns round by round (A B B A A B): appends/s and p99 latency.
#
# Apache Ozone is not measured: its mini cluster does not resolve from
# Maven Central (docs/PERFORMANCE.md gives its published figures).
#
#   bash bench/jvm/run.sh [--json FILE]
#   BENCH_OPTS="-Dbench.mib=64 -Dbench.rounds=1" HBASE_BENCH_ROWS=50000 bash bench/jvm/run.sh
#   BENCH_STEPS="wal" bash bench/jvm/run.sh     # only some of: fs hbase wal
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
json=""
if [ "${1:-}" = --json ]; then json=$(realpath -m "$2"); fi
rows=${HBASE_BENCH_ROWS:-200000}
steps=" ${BENCH_STEPS:-fs hbase wal} "
want() { [[ $steps == *" $1 "* ]]; }
get_seconds=${HBASE_BENCH_SECONDS:-20}
hbase_rounds=${HBASE_BENCH_ROUNDS:-3}

source e2e/tools.sh
py=$E2E_BIN/python
source hadoop-fs/maven.sh
cargo build -q --release --locked --bin ozone --bin ozone-sidecar
export PATH=$root/target/release:$PATH
(cd hadoop-fs && mvn -B -q -ntp package -DskipTests &&
  mvn -B -q -ntp dependency:build-classpath -Dmdep.includeScope=provided -Dmdep.outputFile=target/hadoop.cp)
jar=$root/hadoop-fs/target/ozone-hadoop-fs.jar
(cd bench/jvm && mvn -B -q -ntp package dependency:build-classpath -Dmdep.outputFile=target/hdfs.cp)
bench_jar=$root/bench/jvm/target/ozone-jvm-bench-0.1.0.jar
(cd e2e/hbase && mvn -B -q -ntp package dependency:build-classpath -Dmdep.outputFile=target/hbase.cp)
hbase_cp="$root/e2e/hbase/target/ozone-hbase-e2e-0.1.0.jar:$(cat e2e/hbase/target/hbase.cp)"

work=$(mktemp -d "${TMPDIR:-/tmp}/ozjvmbench-XXXXXX")
base=$work
mkdir -p "$work/logs"
results=$work/results.txt
up_pid=""
stop_cluster() {
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2> /dev/null || true
    for _ in $(seq 1 300); do kill -0 "$up_pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$up_pid" 2> /dev/null || true
    wait "$up_pid" 2> /dev/null || true
    up_pid=""
  fi
}
source e2e/hbase/lib.sh
cleanup() {
  stop_pids
  stop_cluster
  rm -rf "$base"
}
trap cleanup EXIT
step() { echo "== $*"; }

# local_cluster [--sidecars]: a fresh release-build cluster of 3 datanodes in $work/c.
local_cluster() {
  rm -rf "$work/c"
  ozone local up --dir "$work/c" --datanodes 3 "$@" > "$work/up.out" 2> "$work/logs/local-up.log" &
  up_pid=$!
  local want=0
  [ "${1:-}" = --sidecars ] && want=4
  wait_for 120 grep -q '^ready om=' "$work/up.out" || { echo "local up did not start"; exit 1; }
  wait_for 60 test "$(grep -c '^sidecar ' "$work/up.out")" -ge "$want" || true
  [ "$(grep -c '^sidecar ' "$work/up.out")" -ge "$want" ] || { echo "sidecars did not start"; exit 1; }
  om=$(sed -n 's/^ready om=//p' "$work/up.out")
}

if want fs; then
step "FsBench: ozone-rs through the jar"
local_cluster --sidecars
ozone --om "$om" sh volume create /bench > /dev/null
ozone --om "$om" sh bucket create --layout FILE_SYSTEM_OPTIMIZED /bench/fsb > /dev/null
socket=$(sed -n 's/^sidecar node1-sidecar .*socket=\([^ ]*\) .*/\1/p' "$work/up.out")
# shellcheck disable=SC2086
OZONE_SIDECAR_SOCKET=$socket java -Xmx2g ${BENCH_OPTS:-} \
  -cp "$bench_jar:$(cat hadoop-fs/target/hadoop.cp):$jar" io.ozoners.bench.Main ozrs ozrs://ozone/bench/fsb/data |
  tee -a "$results"
stop_cluster

step "FsBench: HDFS 3.5.0"
# shellcheck disable=SC2086
java -Xmx2g ${BENCH_OPTS:-} -cp "$bench_jar:$(cat bench/jvm/target/hdfs.cp)" \
  io.ozoners.bench.Main hdfs "$work/hdfs" 2> "$work/logs/hdfs-bench.log" | tee -a "$results"
rm -rf "$work/hdfs"
fi

# hbase_round POD SYSTEM ROUND: load a table of $rows rows (8 regions,
# flushed and major-compacted, no block cache) from a client in POD, then time
# random gets on it; one result line of each per round.
hbase_round() {
  local t=bench$3 line
  line=$(workload "$1" load "$t" "$rows" 8)
  echo "$line"
  echo "result system=$2 mode=hbase workload=hbase-load-8-regions unit=rows/s value=$(sed -n 's/.* \([0-9.]*\) rows\/s.*/\1/p' <<< "$line") round=$3" |
    tee -a "$results"
  workload "$1" gets "$t" "$rows" 16 5 > /dev/null # warm: HFiles into the page cache
  line=$(workload "$1" gets "$t" "$rows" 16 "$get_seconds")
  echo "$line"
  echo "result system=$2 mode=hbase workload=hbase-random-gets-16t unit=gets/s value=$(awk '{print $2}' <<< "$line") round=$3" |
    tee -a "$results"
}

# Both HBase clusters run side by side; these switch lib.sh's globals
# between them.
use_ozrs() {
  work=$base zk_port=$zk_ozrs rootdir=ozrs://ozone/hbase/root/hbase hbase_extra_xml=""
}
use_hdfs() {
  work=$base/hdfs-hbase zk_port=$zk_hdfs rootdir="$(cat "$base/hdfs.uri")/hbase"
  hbase_extra_xml="<property><name>dfs.client.read.shortcircuit</name><value>true</value></property>
  <property><name>dfs.client.use.legacy.blockreader.local</name><value>true</value></property>
  <property><name>dfs.block.local-path-access.user</name><value>$(id -un)</value></property>"
}

if want hbase; then
step "HBase load and random gets: ozone-rs and HDFS 3.5.0 (local reader), in turns"
local_cluster
ozone --om "$om" sh volume create /hbase > /dev/null
ozone --om "$om" sh bucket create --layout FILE_SYSTEM_OPTIMIZED /hbase/root > /dev/null
java -Xmx1g -cp "$bench_jar:$(cat bench/jvm/target/hdfs.cp)" io.ozoners.bench.Main hdfs-serve \
  "$work/hdfs" "$work/hdfs.uri" > "$work/logs/hdfs-serve.log" 2>&1 &
pids+=($!)
wait_for 120 test -s "$work/hdfs.uri" || { echo "HDFS did not start"; exit 1; }
zk_ozrs="" zk_hdfs=""
use_ozrs
start_sidecar rs node1
start_sidecar client node2
start_hbase rs rs
zk_ozrs=$zk_port
mkdir -p "$base/hdfs-hbase/logs"
use_hdfs
no_sidecar hdfs
start_hbase hdfs hdfs
zk_hdfs=$zk_port
# An unmeasured load on each first (HBase's and the clients' code compiled,
# the write paths' connections open): the rounds compare warm systems.
use_ozrs
workload client load benchw "$((rows / 2))" 8 > /dev/null
use_hdfs
workload hdfs load benchw "$((rows / 2))" 8 > /dev/null
# Rounds in the order A B, B A, A B, ...: a machine that drifts favours
# neither system, and each round's ratio is against the run next to it.
for ((r = 0; r < hbase_rounds; r++)); do
  order=(ozrs hdfs)
  if ((r % 2 == 1)); then order=(hdfs ozrs); fi
  for sys in "${order[@]}"; do
    if [ "$sys" = ozrs ]; then
      use_ozrs
      hbase_round client ozone-rs "$r"
    else
      use_hdfs
      hbase_round hdfs hdfs "$r"
    fi
  done
done
use_ozrs
stop_pids
stop_cluster
fi

if want wal; then
step "WAL appends + hflush, 8 threads: ozone-rs and HDFS 3.5.0 in turns"
local_cluster --sidecars
ozone --om "$om" sh volume create /wal > /dev/null
ozone --om "$om" sh bucket create --layout FILE_SYSTEM_OPTIMIZED /wal/fsb > /dev/null
socket=$(sed -n 's/^sidecar node1-sidecar .*socket=\([^ ]*\) .*/\1/p' "$work/up.out")
rm -rf "$work/hdfs-wal" "$work/hdfs-wal.uri"
java -Xmx1g -cp "$bench_jar:$(cat bench/jvm/target/hdfs.cp)" io.ozoners.bench.Main hdfs-serve \
  "$work/hdfs-wal" "$work/hdfs-wal.uri" > "$work/logs/hdfs-wal.log" 2>&1 &
pids+=($!)
wait_for 120 test -s "$work/hdfs-wal.uri" || { echo "HDFS did not start"; exit 1; }
# shellcheck disable=SC2086
OZONE_SIDECAR_SOCKET=$socket java -Xmx2g ${BENCH_OPTS:-} \
  -cp "$bench_jar:$(cat bench/jvm/target/hdfs.cp):$jar" io.ozoners.bench.Main wal \
  ozrs://ozone/wal/fsb/w "$(cat "$work/hdfs-wal.uri")/wal" | tee -a "$results"
stop_pids
stop_cluster
fi

step "results"
"$py" bench/jvm/report.py "$results" ${json:+--json "$json"}
