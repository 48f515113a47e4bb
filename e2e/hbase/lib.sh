# Helpers for running a real HBase (ZooKeeper, HMaster, region servers, the
# checking workload client) as separate JVMs, and the sidecars of the shipped
# HBase example. Sourced by e2e/hbase/run.sh and bench/jvm/run.sh, which set:
#   work        the run's scratch directory (logs in $work/logs)
#   py          a Python with PyYAML (e2e/tools.sh's)
#   jar         the ozrs FileSystem jar
#   hbase_cp    the HBase classpath (hbase-server and the workload)
#   rootdir     hbase.rootdir
#   om          the OM address (for sidecars)
# and may set hbase_min_rs (region servers the master waits for, 1) and
# hbase_extra_xml (more hbase-site.xml properties).
# Every started process goes into the array `pids`, which the caller's
# cleanup stops.

pids=()
hbase_min_rs=${hbase_min_rs:-1}
hbase_extra_xml=${hbase_extra_xml:-}

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# metric HOST:PORT NAME-WITH-LABELS: the value on /metrics, 0 when absent.
metric() {
  curl -fsS "http://$1/metrics" | awk -v m="$2" '$1 == m { v = $2 } END { print (v == "" ? 0 : v) + 0 }'
}

# wait_for SECONDS COMMAND...: until COMMAND succeeds, at most SECONDS.
wait_for() {
  local limit=$1
  shift
  for _ in $(seq 1 "$((limit * 2))"); do
    "$@" > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# Stops every process in `pids`, newest first: SIGTERM, SIGKILL after 10 s.
stop_pids() {
  local k
  for ((k = ${#pids[@]} - 1; k >= 0; k--)); do kill -TERM "${pids[k]}" 2> /dev/null || true; done
  for ((k = ${#pids[@]} - 1; k >= 0; k--)); do
    for _ in $(seq 1 100); do kill -0 "${pids[k]}" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "${pids[k]}" 2> /dev/null || true
    wait "${pids[k]}" 2> /dev/null || true
  done
  pids=()
}

# start_sidecar NAME NODE: the sidecar of the shipped HBase example's pod
# NAME on local node NODE (its policy file, arguments and environment, paths
# mapped by example_pod.py). Sets http_NAME to its HTTP address and writes
# the pod's application environment to $work/pods/NAME/env.
start_sidecar() {
  local name=$1 node=$2 w=$work/pods/$1
  mkdir -p "$w"
  "$py" e2e/hbase/example_pod.py examples/workloads/hbase-regionserver.yaml "$om" \
    "$work/c/$node/sockets" "$w" "$jar" > "$w/vars.sh"
  # shellcheck disable=SC1091
  source "$w/vars.sh"
  NODE_NAME=$node "${SIDECAR_CMD[@]}" "--ready-file=$w/ready" > "$work/logs/sidecar-$name.log" 2>&1 &
  pids+=($!)
  wait_for 60 test -s "$w/ready" || {
    echo "sidecar $name did not start"
    return 1
  }
  printf -v "http_$name" '%s' "$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$w/ready")"
  printf '%s\n' "${RS_ENV[@]}" > "$w/env"
}

# A pod with no sidecar (HBase on HDFS): an empty environment.
no_sidecar() {
  mkdir -p "$work/pods/$1"
  : > "$work/pods/$1/env"
}

hbase_jvm_opts=(-Xmx640m -XX:+UseParallelGC -Djava.net.preferIPv4Stack=true
  -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true
  --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
  --add-exports java.base/sun.net.dns=ALL-UNNAMED --add-exports java.base/sun.net.util=ALL-UNNAMED)

# start_zookeeper: a standalone ZooKeeper (from hbase-server's dependencies)
# on a free port, in zk_port, with no state from an earlier HBase.
start_zookeeper() {
  zk_port=$(free_port)
  rm -rf "$work/zk" "$work/tmp" "$work/conf"
  mkdir -p "$work/zk"
  java -Xmx128m -Dzookeeper.admin.enableServer=false -cp "$hbase_cp" \
    org.apache.zookeeper.server.ZooKeeperServerMain "$zk_port" "$work/zk" > "$work/logs/zookeeper.log" 2>&1 &
  pids+=($!)
}

# hbase_conf NAME: the configuration directory of process NAME
# (hbase-site.xml as a user writes it, and where it logs).
hbase_conf() {
  local d=$work/conf/$1
  mkdir -p "$d" "$work/tmp/$1"
  cat > "$d/hbase-site.xml" << XML
<configuration>
  <property><name>hbase.cluster.distributed</name><value>true</value></property>
  <property><name>hbase.rootdir</name><value>$rootdir</value></property>
  <property><name>hbase.tmp.dir</name><value>$work/tmp/$1</value></property>
  <property><name>hbase.zookeeper.quorum</name><value>127.0.0.1</value></property>
  <property><name>hbase.zookeeper.property.clientPort</name><value>$zk_port</value></property>
  <property><name>zookeeper.session.timeout</name><value>10000</value></property>
  <property><name>hbase.master.port</name><value>0</value></property>
  <property><name>hbase.master.info.port</name><value>-1</value></property>
  <property><name>hbase.regionserver.port</name><value>0</value></property>
  <property><name>hbase.regionserver.info.port</name><value>-1</value></property>
  <property><name>hbase.master.wait.on.regionservers.mintostart</name><value>$hbase_min_rs</value></property>
  <property><name>hbase.balancer.period</name><value>3600000</value></property>
  <property><name>hbase.client.retries.number</name><value>40</value></property>
  <property><name>hbase.hfile.compaction.discharger.interval</name><value>3000</value></property>
  $hbase_extra_xml
</configuration>
XML
  cat > "$d/log4j.properties" << PROPS
log4j.rootLogger=INFO,F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File=$work/logs/$1.log
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{2}: %m%n
log4j.logger.org.apache.zookeeper=WARN
PROPS
}

# hbase_jvm NAME POD CLASS ARGS...: an HBase server JVM in the background,
# with POD's environment; its pid in pid_NAME.
hbase_jvm() {
  local name=$1 pod=$2 class=$3 envs
  shift 3
  hbase_conf "$name"
  mapfile -t envs < "$work/pods/$pod/env"
  env "${envs[@]}" java "${hbase_jvm_opts[@]}" -cp "$work/conf/$name:$hbase_cp:$jar" "$class" "$@" \
    > "$work/logs/$name.out" 2>&1 &
  pids+=($!)
  printf -v "pid_$name" '%s' "$!"
}

# start_hbase PODS...: ZooKeeper, an HMaster in the first pod and a region
# server rsN in each of the others; waits until the master is initialised.
# Logs of an earlier HBase in $work/logs move to $work/logs/earlier-N.
start_hbase() {
  local k=1 pod old
  if [ -f "$work/logs/master.log" ]; then
    old=$work/logs/earlier-$(find "$work/logs" -maxdepth 1 -name 'earlier-*' | wc -l)
    mkdir -p "$old"
    mv "$work"/logs/{master,rs*,client,zookeeper}.* "$old/" 2> /dev/null || true
  fi
  start_zookeeper
  hbase_jvm master "$1" org.apache.hadoop.hbase.master.HMaster start
  shift
  for pod in "$@"; do
    hbase_jvm "rs$k" "$pod" org.apache.hadoop.hbase.regionserver.HRegionServer start
    k=$((k + 1))
  done
  wait_for 240 grep -q "Master has completed initialization" "$work/logs/master.log" || {
    echo "the HMaster did not initialise"
    return 1
  }
}

# workload POD ARGS...: the checking HBase client (Workload.java) in the
# foreground, with POD's environment.
workload() {
  local pod=$1 envs
  shift
  hbase_conf client
  mapfile -t envs < "$work/pods/$pod/env"
  env "${envs[@]}" java "${hbase_jvm_opts[@]}" -cp "$work/conf/client:$hbase_cp:$jar" \
    io.ozoners.e2e.hbase.Workload "$@"
}
