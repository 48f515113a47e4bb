#!/usr/bin/env bash
# Builds the Hadoop FileSystem jar (target/ozone-hadoop-fs.jar) and runs its
# tests: Hadoop's own FileSystem contract tests and the JVM process tests
# against one real local cluster (`ozone local up`, from the workspace's
# target/debug/ozone, built here when missing), then the shaded jar as a
# user meets it: Hadoop's own shell (FsShell) with only hadoop-common and
# the jar on the classpath, against a cluster of its own. Maven and a JDK
# (11+) are the machine's (Maven is installed from Debian's packages when
# missing); every artifact comes from Maven Central.
#
#   bash hadoop-fs/test.sh                       # package + every test + the shell
#   bash hadoop-fs/test.sh -Dtest=TestJvmReads   # some tests (the shell still runs)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source hadoop-fs/maven.sh
if [ -z "${OZONE_BIN:-}" ]; then
  cargo build -q --locked --bin ozone
  export OZONE_BIN=$root/target/debug/ozone
fi
cd hadoop-fs
mvn -B -ntp package "$@"
ls -l target/ozone-hadoop-fs.jar

echo "== the shaded jar under Hadoop's own shell"
mvn -B -q -ntp dependency:build-classpath -Dmdep.includeScope=provided -Dmdep.outputFile=target/hadoop.cp
work=$(mktemp -d "${TMPDIR:-/tmp}/ozfs-XXXXXX")
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$up_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
"$OZONE_BIN" local up --dir "$work/c" --datanodes 3 --sidecars > "$work/up.out" 2> "$work/up.err" &
up_pid=$!
for _ in $(seq 1 600); do
  [ "$(grep -c '^sidecar ' "$work/up.out" 2>/dev/null)" = 4 ] && break
  kill -0 "$up_pid" 2>/dev/null || { cat "$work/up.err"; exit 1; }
  sleep 0.1
done
[ "$(grep -c '^sidecar ' "$work/up.out")" = 4 ] || { echo "local up did not start"; cat "$work/up.err"; exit 1; }
om=$(sed -n 's/^ready om=//p' "$work/up.out")
socket=$(sed -n 's/^sidecar node1-sidecar .*socket=\([^ ]*\) .*/\1/p' "$work/up.out")
"$OZONE_BIN" --om "$om" sh volume create /vol > /dev/null
"$OZONE_BIN" --om "$om" sh bucket create --layout FILE_SYSTEM_OPTIMIZED /vol/fsb > /dev/null
head -c 3000000 /dev/urandom > "$work/in.bin"
# What a user writes into core-site.xml.
mkdir -p "$work/conf"
cat > "$work/conf/core-site.xml" <<XML
<configuration>
  <property><name>ozone.client.sidecar.socket</name><value>$socket</value></property>
</configuration>
XML
fsh() {
  java -cp "$work/conf:target/ozone-hadoop-fs.jar:$(cat target/hadoop.cp)" org.apache.hadoop.fs.FsShell \
    "$@" 2> "$work/fsh.err" || { cat "$work/fsh.err"; return 1; }
}
fsh -mkdir -p ozrs://ozone/vol/fsb/dir/sub
fsh -put "$work/in.bin" ozrs://ozone/vol/fsb/dir/sub/in.bin
fsh -cat ozrs://ozone/vol/fsb/dir/sub/in.bin > "$work/out.bin"
cmp "$work/in.bin" "$work/out.bin"
listing=$(fsh -ls -R ozrs://ozone/vol/fsb/)
grep -q "3000000 .* ozrs://ozone/vol/fsb/dir/sub/in.bin" <<< "$listing" || { echo "unexpected listing: $listing"; exit 1; }
fsh -mv ozrs://ozone/vol/fsb/dir/sub ozrs://ozone/vol/fsb/moved
fsh -test -e ozrs://ozone/vol/fsb/moved/in.bin
want=$("$OZONE_BIN" --om "$om" sh key checksum /vol/fsb/moved/in.bin | cut -d' ' -f2)
got=$(fsh -checksum ozrs://ozone/vol/fsb/moved/in.bin)
grep -qi "COMPOSITE-CRC32C.*$want" <<< "$got" || { echo "checksum: $got, expected $want"; exit 1; }
fsh -rm -r -skipTrash ozrs://ozone/vol/fsb/moved
if fsh -test -e ozrs://ozone/vol/fsb/moved 2> /dev/null; then echo "still there after -rm -r"; exit 1; fi
echo "FsShell with the shaded jar: mkdir, put, cat (bit-exact), ls -R, mv, checksum, rm -r: ok"
