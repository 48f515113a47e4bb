#!/usr/bin/env bash
# A real HBase on the cluster, through the ozrs FileSystem jar: ZooKeeper,
# an HMaster and two region servers, each its own JVM (hbase-server
# 2.6.4-hadoop3 from Maven Central), on `ozone local up` with four
# datanodes. Each HBase process reaches the cluster through its own sidecar,
# started from the shipped examples/workloads/hbase-regionserver.yaml (its
# policy file, its arguments, its environment; example_pod.py maps the
# pod's paths onto local ones and refuses anything else).
#
# Steps, each an assertion:
#   1. a pre-split table, ROWS rows written, flushed, major-compacted
#   2. a full scan and random gets, every value compared
#   3. the HFile reads were short-circuit without our verification: the
#      sidecars' stream opens by verification, descriptors relayed, and
#      the datanodes' descriptor counts
#   4. a flipped byte in an HFile's local replica: HBase's checksum
#      catches it, its fallback reader (verifying) gets the right rows, the
#      bad replica is reported and replaced
#   5. SIGKILL of a datanode of a WAL being written, under writes: no put
#      fails
# (A region server killed under writes is e2e/pods' step 4, with pods.)
#
#   bash e2e/hbase/run.sh              (HBASE_ROWS=200000 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
rows=${HBASE_ROWS:-200000}
started=$(date +%s)

source e2e/tools.sh
py=$E2E_BIN/python
source hadoop-fs/maven.sh
cargo build -q --locked --bin ozone --bin ozone-sidecar
export PATH=$root/target/debug:$PATH
(cd hadoop-fs && mvn -B -q -ntp package -DskipTests)
jar=$root/hadoop-fs/target/ozone-hadoop-fs.jar
(cd e2e/hbase && mvn -B -q -ntp package dependency:build-classpath -Dmdep.outputFile=target/hbase.cp)
hbase_cp="$root/e2e/hbase/target/ozone-hbase-e2e-0.1.0.jar:$(cat e2e/hbase/target/hbase.cp)"

work=$(mktemp -d "${TMPDIR:-/tmp}/ozhbase-XXXXXX")
mkdir -p "$work/logs"
source e2e/hbase/lib.sh
hbase_min_rs=2
up_pid=""
ok=0
cleanup() {
  stop_pids
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2> /dev/null || true
    for _ in $(seq 1 300); do kill -0 "$up_pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$up_pid" 2> /dev/null || true
  fi
  if [ "$ok" != 1 ]; then
    for f in "$work"/logs/*.log "$work"/logs/*.out "$work"/c/logs/*.log; do
      [ -f "$f" ] || continue
      echo "---- tail of $f"
      tail -n 40 "$f"
    done
  fi
  if [ -n "${HBASE_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
step() { echo "== [$(($(date +%s) - started))s] $*"; }
fail() {
  echo "FAILED: $*"
  exit 1
}
acked_at_least() { [ -f "$1" ] && [ "$(wc -l < "$1")" -ge "$2" ]; }

step "local cluster: OM and four datanodes"
ozone local up --dir "$work/c" --datanodes 4 > "$work/up.out" 2> "$work/logs/local-up.log" &
up_pid=$!
wait_for 120 grep -q '^ready om=' "$work/up.out" || fail "local up did not start"
om=$(sed -n 's/^ready om=//p' "$work/up.out")
ozone --om "$om" sh volume create /hbase > /dev/null
ozone --om "$om" sh bucket create --layout FILE_SYSTEM_OPTIMIZED /hbase/root > /dev/null
rootdir=ozrs://ozone/hbase/root/hbase

step "sidecars from examples/workloads/hbase-regionserver.yaml: rs1 on node1, rs2 on node2, master on node3"
start_sidecar rs1 node1 || fail "sidecar rs1"
start_sidecar rs2 node2 || fail "sidecar rs2"
start_sidecar master node3 || fail "sidecar master"

step "ZooKeeper, HMaster (pod master), two region servers (pods rs1, rs2)"
start_hbase master rs1 rs2 || fail "HBase did not start"

step "1. create a table of 8 regions, write $rows rows, flush, major-compact"
workload master load usertable "$rows" 8
workload master create writes 4

step "2. full scan and random gets"
workload master verify usertable "$rows" 10000

step "3. HFile reads: short-circuit, without our verification"
for pod in rs1 rs2; do
  h=http_$pod
  off=$(metric "${!h}" 'ozone_sidecar_stream_opens_total{verify="false"}')
  on=$(metric "${!h}" 'ozone_sidecar_stream_opens_total{verify="true"}')
  fds=$(metric "${!h}" ozone_sidecar_passthrough_descriptors_total)
  served_off=$(($(metric "${!h}" 'ozone_sidecar_reads_total{kind="read",verify="false"}') +
    $(metric "${!h}" 'ozone_sidecar_reads_total{kind="stream",verify="false"}')))
  echo "   $pod sidecar: streams opened verify=false $off, verify=true $on; descriptors relayed $fds; reads served verify=false $served_off"
  [ "$off" -gt 0 ] || fail "$pod: no stream opened without verification (HFileSystem's no-checksum instance)"
  [ "$on" -gt 0 ] || fail "$pod: no stream opened with verification"
  [ "$fds" -gt 0 ] || fail "$pod: no block descriptor relayed: no short-circuit read"
  # Every HFile has a replica on its region server's node (written there):
  # no unverified read went through the sidecar.
  [ "$served_off" = 0 ] || fail "$pod: $served_off unverified reads went through the sidecar, not short-circuit"
done
for node in node1 node2; do
  dn_http=$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$work/c/$node/ready")
  n=$(metric "$dn_http" ozone_datanode_sc_opens_total)
  echo "   $node datanode: block descriptors handed out $n"
  [ "$n" -gt 0 ] || fail "$node: its datanode handed out no block descriptor"
done

step "4. a flipped byte in the local replica of an HFile"
probe=$((rows / 3 + 7))
mapfile -t files < <(workload master region-files usertable "$probe")
server=${files[0]#server }
files=("${files[@]:1}")
[ "${#files[@]}" = 1 ] || fail "expected one HFile in the region after major compaction: ${files[*]}"
hfile=${files[0]% *}
hsize=${files[0]##* }
info=$(ozone --om "$om" sh key info "$hfile")
[ "$(grep -c '^block ' <<< "$info")" = 1 ] || fail "expected the HFile in one block: $info"
blockline=$(grep '^block ' <<< "$info")
bid=$(awk '{print $2}' <<< "$blockline")
replica() { echo "$work/c/$1/data/containers/${bid%%:*}/chunks/${bid##*:}.block"; }
# The replica on the node of the region server that holds the region (it
# wrote the HFile there).
pod=""
for p in rs1 rs2; do
  if grep -qF "WALs/$server/" "$work/logs/$p.log"; then pod=$p; fi
done
[ -n "$pod" ] || fail "no region server log names $server"
bad=node${pod#rs}
grep -q "@$bad(" <<< "$blockline" || fail "no replica of $hfile on $pod's node $bad: $blockline"
[ -f "$(replica "$bad")" ] || fail "no block file at $(replica "$bad")"
good_sum=$(md5sum < "$(replica "$bad")")
"$py" - "$(replica "$bad")" "$((hsize / 3))" << 'PY'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:  # in place: open descriptors see it
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0xFF]))
PY
echo "   flipped byte $((hsize / 3)) of $hfile's replica on $bad (block $bid)"
h=http_$pod
failures_before=$(metric "${!h}" ozone_sidecar_checksum_failures_total)
workload master scan-region usertable "$probe" "$rows"
grep -q "HBase checksum verification failed" "$work/logs/$pod.log" ||
  fail "$pod: HBase's own checksum did not catch the flipped byte"
failures=$(metric "${!h}" ozone_sidecar_checksum_failures_total)
echo "   HBase's checksum failed and its fallback reader verified; $pod sidecar checksum failures $failures_before -> $failures"
[ "$failures" -gt "$failures_before" ] || fail "$pod: our verification did not find the bad replica"
repaired() {
  local line r n
  line=$(ozone --om "$om" sh key info "$hfile" | grep '^block ')
  [ "$(grep -o 'HEALTHY' <<< "$line" | wc -l)" = 3 ] || return 1
  for r in $(grep -o '@node[0-9]*' <<< "$line"); do
    n=${r#@}
    [ "$(md5sum < "$(replica "$n")" 2> /dev/null)" = "$good_sum" ] || return 1
  done
}
wait_for 120 repaired || fail "the bad replica was not replaced: $(ozone --om "$om" sh key info "$hfile" | grep '^block ')"
echo "   repaired: $(ozone --om "$om" sh key info "$hfile" | grep '^block ')"

step "5. SIGKILL a datanode of a WAL being written, under writes"
# (A region server killed under writes is e2e/pods' step: a region server pod
# force-deleted.)
workload master writer writes 2000000 60 "$work/acked-dn" > "$work/logs/writer-dn.out" 2>&1 &
writer=$!
wait_for 120 acked_at_least "$work/acked-dn" 1000 || fail "the writer acknowledged no 1000 puts in 120 s"
# The newest WAL, and a datanode of its pipeline other than the first (the
# writing region server's own node: blocks are written local-first).
wal=$(ozone --om "$om" fs -ls -R /hbase/root/hbase/WALs | awk '$1 !~ /^d/ {print $NF}' | grep -v -- -splitting | sort | tail -1)
walline=$(ozone --om "$om" sh key info "$wal" 2> /dev/null | grep '^block ' | tail -1 || true)
victim=$(grep -o '@node[0-9]*(' <<< "$walline" | sed -n '2{s/^@//;s/($//;p}' || true)
[ -n "$victim" ] || fail "no second replica of the WAL $wal: ${walline:-no block}"
# Only this run's datanodes: their data directories are under $work.
dn_pid=$(pgrep -f -- "--data-dir $work/c/.* --node-name $victim( |$)" | head -1)
[ -n "$dn_pid" ] || fail "no datanode process for $victim"
kill -KILL "$dn_pid"
echo "   killed datanode $victim (pid $dn_pid), a replica of the WAL being written: $walline"
wait "$writer" || fail "the writer failed: $(tail -5 "$work/logs/writer-dn.out")"
grep '^writer:' "$work/logs/writer-dn.out"
grep -q '^writer: [0-9]* acknowledged, 0 failed' "$work/logs/writer-dn.out" || fail "puts failed while a datanode was down"
kill -0 "$pid_rs1" || fail "rs1 died with the datanode"
kill -0 "$pid_rs2" || fail "rs2 died with the datanode"
workload master check-acked writes "$work/acked-dn"
workload master verify usertable "$rows" 1000

ok=1
step "passed in $(($(date +%s) - started)) s"
