#!/usr/bin/env bash
# One node of e2e/nodes, in a mount namespace of its own (started by
# nodes.sh with NODE_NAME, NODE_INDEX, NODE_IP, NODE_LABELS): the host paths
# of NODES_HOST_PATHS bound to this node's directories, a containerd with
# its own root, state, socket and CNI configuration (host-local addresses
# 10.244.<index>.0/24 on the shared bridge), the images imported, and a
# kubelet (cgroup v1, cgroupfs driver, its own cgroup root and root
# directory).
#
# SIGTERM: the kubelet stops, every process in the node's cgroups is
# killed, then containerd and its shims (found by this node's socket path in
# their command line); the node's cgroups are removed.
set -euo pipefail
d=$CP_DIR/$NODE_NAME
rm -rf "$d"; mkdir -p "$d"/{cni,ipam,opt,kubelet,host}
for p in $NODES_HOST_PATHS; do
  mkdir -p "$d/host$p"
  mount --bind "$d/host$p" "$p"
done

# The kubelet links container logs into /var/log/containers and listens for
# device plugins in /var/lib/kubelet/device-plugins (fixed paths, whatever
# its root directory): each node gets its own.
mkdir -p /var/log/containers /var/lib/kubelet/device-plugins "$d/device-plugins"
mount -t tmpfs -o mode=0755 ozone-e2e /var/log/containers
mount --bind "$d/device-plugins" /var/lib/kubelet/device-plugins

cgroot=/ozone-e2e-$(printf '%s' "$CP_DIR" | sha256sum | cut -c1-8)/$NODE_NAME
for c in /sys/fs/cgroup/*/; do
  [ -d "$c" ] || continue
  mkdir -p "$c${cgroot#/}"
done
# A new cpuset cgroup starts with no CPUs or memory nodes: copy the root's.
if [ -d /sys/fs/cgroup/cpuset ]; then
  p=/sys/fs/cgroup/cpuset
  for part in ${cgroot//\// }; do
    p=$p/$part
    cat /sys/fs/cgroup/cpuset/cpuset.cpus > "$p/cpuset.cpus"
    cat /sys/fs/cgroup/cpuset/cpuset.mems > "$p/cpuset.mems"
  done
fi

sock=$d/containerd.sock
cat > "$d/cni/10-ozone-e2e.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "ozone-e2e",
  "plugins": [
    {
      "type": "bridge", "bridge": "oz0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$d/ipam",
        "ranges": [[{"subnet": "10.244.0.0/16", "rangeStart": "10.244.$NODE_INDEX.2",
                     "rangeEnd": "10.244.$NODE_INDEX.254", "gateway": "10.244.0.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
cat > "$d/containerd.toml" <<TOML
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$NODES_PAUSE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false
  # Setting a negative oom_score_adj (the sandbox's -998) needs
  # CAP_SYS_RESOURCE, which this machine's root lacks: no score below
  # containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
TOML

kubelet_pid=""
containerd_pid=""
stop() {
  trap "" TERM INT
  set +e
  if [ -n "$kubelet_pid" ]; then
    kill -TERM "$kubelet_pid" 2> /dev/null
    for _ in $(seq 1 100); do kill -0 "$kubelet_pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$kubelet_pid" 2> /dev/null; wait "$kubelet_pid" 2> /dev/null
  fi
  # Every process of this node's pods: the cgroups hold them all.
  local c pid
  for _ in 1 2 3; do
    for c in /sys/fs/cgroup/pids/${cgroot#/} /sys/fs/cgroup/memory/${cgroot#/}; do
      [ -d "$c" ] || continue
      find "$c" -name cgroup.procs -exec cat {} + 2> /dev/null | while read -r pid; do
        kill -KILL "$pid" 2> /dev/null
      done
    done
    sleep 0.5
  done
  if [ -n "$containerd_pid" ]; then
    kill -TERM "$containerd_pid" 2> /dev/null
    for _ in $(seq 1 100); do kill -0 "$containerd_pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$containerd_pid" 2> /dev/null; wait "$containerd_pid" 2> /dev/null
  fi
  # The shims of this node's containerd (their -address is this node's socket).
  for pid in $(grep -l -F -- "$sock" /proc/[0-9]*/cmdline 2> /dev/null | cut -d/ -f3); do
    [ "$pid" = $$ ] || kill -KILL "$pid" 2> /dev/null
  done
  sleep 0.5
  # Remove the node's cgroups, deepest first, then the shared parent if empty.
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c${cgroot#/}" ] || continue
    find "$c${cgroot#/}" -depth -type d -exec rmdir {} + 2> /dev/null
    rmdir "$(dirname "$c${cgroot#/}")" 2> /dev/null
  done
  exit 0
}
trap stop TERM INT

containerd --config "$d/containerd.toml" > "$d/containerd.log" 2>&1 &
containerd_pid=$!
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "containerd did not start:"; tail -20 "$d/containerd.log"; stop; }
for a in $NODES_ARCHIVES; do
  ctr --address "$sock" -n k8s.io images import --no-unpack=false "$a" > /dev/null
done
echo "$NODE_NAME: containerd up, images imported"

cat > "$d/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: $NODE_IP
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$CP_DIR/pki/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$sock
cgroupDriver: cgroupfs
cgroupRoot: $cgroot
cgroupsPerQOS: true
failCgroupV1: false
failSwapOn: false
clusterDNS: [10.244.0.1]
clusterDomain: cluster.local
resolvConf: ""
protectKernelDefaults: false
makeIPTablesUtilChains: false
localStorageCapacityIsolation: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
maxPods: 40
podLogsDir: $d/pod-logs
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 20s
nodeStatusUpdateFrequency: 5s
rotateCertificates: false
serverTLSBootstrap: false
YAML
"$NODES_BIN/kubelet" --config "$d/kubelet.yaml" --kubeconfig "$CP_DIR/$NODE_NAME.kubeconfig" \
  --root-dir "$d/kubelet" --cert-dir "$d/kubelet/pki" --hostname-override "$NODE_NAME" \
  --node-ip "$NODE_IP" ${NODE_LABELS:+--node-labels "$NODE_LABELS"} --v=1 > "$d/kubelet.log" 2>&1 &
kubelet_pid=$!
echo "$NODE_NAME: kubelet started (pid $kubelet_pid)"
while kill -0 "$kubelet_pid" 2> /dev/null; do sleep 1 & wait $! || true; done
echo "$NODE_NAME: the kubelet exited:"; tail -20 "$d/kubelet.log"
stop
