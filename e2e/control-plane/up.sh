#!/usr/bin/env bash
# Starts a real Kubernetes control plane on loopback: etcd, kube-apiserver
# (RBAC and Node authorizers, service-account token signing, the default
# admission plugins), kube-controller-manager (the controllers a StatefulSet
# workload needs), kube-scheduler and a fake kubelet for 4 nodes. Writes an
# admin kubeconfig to $CP_DIR/admin.kubeconfig.
#
#   up.sh               runs until interrupted
#   up.sh CMD [ARG...]  runs CMD with KUBECONFIG set, then tears down and
#                       exits with CMD's status
#
# CP_DIR (default target/control-plane/run) holds certificates, etcd data and
# logs (*.log); it is wiped at start.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$("$here/build.sh")
dir=${CP_DIR:-$root/target/control-plane/run}
rm -rf "$dir"; mkdir -p "$dir/pki"
pids=()      # in start order: etcd, kube-apiserver, then the rest
# alive PID: running (a zombie, exited but not yet reaped, is not).
alive() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
# stop_bounded GRACE PID...: SIGTERM, up to GRACE seconds for all to exit,
# then SIGKILL the rest; reaps them. Never waits without a limit.
stop_bounded() {
  local grace=$1 p left end=$((SECONDS + $1)); shift
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  while :; do
    left=0
    for p in "$@"; do alive "$p" && left=1; done
    [ $left = 0 ] && break
    if [ $SECONDS -ge $end ]; then
      for p in "$@"; do
        if alive "$p"; then
          echo "control plane: $(cat "/proc/$p/comm" 2>/dev/null) (pid $p) did not stop within ${grace}s of SIGTERM: SIGKILL" >&2
          kill -KILL "$p" 2>/dev/null || true
        fi
      done
      break
    fi
    sleep 0.1
  done
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}
# In order: the clients of the API server (kubelets, scheduler, controller
# manager), then the API server while etcd still answers (its graceful
# shutdown talks to etcd), then etcd.
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if [ ${#pids[@]} -gt 2 ]; then stop_bounded "${CP_CLIENT_GRACE:-15}" "${pids[@]:2}"; fi
  if [ ${#pids[@]} -gt 1 ]; then stop_bounded 30 "${pids[1]}"; fi
  if [ ${#pids[@]} -gt 0 ]; then stop_bounded 15 "${pids[0]}"; fi
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

# CP_ADDRESS: the API server's address (e2e/nodes puts it on its bridge,
# where pods reach it); CP_KUBELETS=real starts e2e/nodes/nodes.sh (real
# kubelets) in place of the fake kubelet.
addr=${CP_ADDRESS:-127.0.0.1}
kubelets=${CP_KUBELETS:-fake}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("'"$addr"'",0)); print(s.getsockname()[1])'; }
etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)

# Certificates: one CA for serving and client certs, a key pair for
# service-account tokens.
pki=$dir/pki
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=e2e-ca" \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
cert() { # name subject [san]
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
  local ext=$pki/$1.ext
  echo "basicConstraints=CA:FALSE" > "$ext"
  [ -n "${3:-}" ] && echo "subjectAltName=$3" >> "$ext"
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$ext" -out "$pki/$1.crt" 2>/dev/null
}
cert apiserver "/CN=kube-apiserver" \
  "IP:127.0.0.1,IP:$addr,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
cert admin "/O=system:masters/CN=e2e-admin"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

kubeconfig=$dir/admin.kubeconfig
cat > "$kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://$addr:$api_port", certificate-authority: "$pki/ca.crt"}
users:
- name: admin
  user: {client-certificate: "$pki/admin.crt", client-key: "$pki/admin.key"}
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
KC

start() { # name args... (a name that is not a built binary is run as the command args)
  local name=$1; shift
  if [ -x "$bin/$name" ]; then set -- "$bin/$name" "$@"; fi
  "$@" > "$dir/$name.log" 2>&1 &
  pids+=($!)
}

if [ "$kubelets" = real ]; then reconciler=lease; else reconciler=none; fi
start etcd --name e2e --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "e2e=http://127.0.0.1:$etcd_peer" --unsafe-no-fsync --quota-backend-bytes 2147483648

start kube-apiserver --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address "$addr" --advertise-address "$addr" --secure-port "$api_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --api-audiences https://kubernetes.default.svc.cluster.local \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true \
  --cert-dir "$dir/apiserver-certs" --profiling=false --endpoint-reconciler-type "$reconciler" \
  --kubelet-preferred-address-types InternalIP \
  --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$pki/apiserver-kubelet-client.key"

ready=""
for _ in $(seq 1 120); do
  if curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
      "https://$addr:$api_port/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.5
done
if [ -z "$ready" ]; then
  echo "kube-apiserver did not become ready; last log lines:" >&2
  tail -30 "$dir/kube-apiserver.log" >&2; tail -10 "$dir/etcd.log" >&2
  exit 1
fi

controllers=serviceaccount-controller,serviceaccount-token-controller,namespace-controller,garbage-collector-controller,statefulset-controller,deployment-controller,replicaset-controller,disruption-controller,endpointslice-controller,persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,ttl-after-finished-controller,job-controller
# Real kubelets register with the not-ready taint; the node lifecycle
# controller lifts it (and taints nodes that stop reporting), pod GC
# finishes pods of gone nodes.
if [ "$kubelets" = real ]; then
  controllers=$controllers,node-lifecycle-controller,pod-garbage-collector-controller
fi
start kube-controller-manager --kubeconfig "$kubeconfig" \
  --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --use-service-account-credentials=false \
  --controllers "${CP_CONTROLLERS:-$controllers}" \
  --concurrent-statefulset-syncs 5 --concurrent-gc-syncs 10

start kube-scheduler --kubeconfig "$kubeconfig" \
  --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --leader-elect=false --bind-address 127.0.0.1 --secure-port 0

if [ "$kubelets" = real ]; then
  export CP_BIN=$bin CP_DIR=$dir CP_API="https://$addr:$api_port"
  start nodes bash "$root/e2e/nodes/nodes.sh"
  for _ in $(seq 1 600); do
    [ -f "$dir/nodes.ready" ] && break
    alive "${pids[-1]}" || { echo "the nodes did not start:" >&2; tail -30 "$dir/nodes.log" >&2; exit 1; }
    sleep 0.5
  done
  [ -f "$dir/nodes.ready" ] || { echo "the nodes were not Ready in 300 s" >&2; tail -30 "$dir/nodes.log" >&2; exit 1; }
  export KUBECONFIG=$kubeconfig
else
  start fake-kubelet --kubeconfig "$kubeconfig" --nodes "${CP_NODES:-node-1,node-2,node-3,node-4}" \
    --ready-after "${CP_READY_AFTER:-2s}" \
    --labels "${CP_NODE_LABELS:-node-role.example.com/storage=true}"
  export KUBECONFIG=$kubeconfig
  # The fake kubelet honours the e2e.ozone-rs.io/ready=false pod annotation.
  export E2E_READY_FLAG=1
fi
echo "control plane up: KUBECONFIG=$kubeconfig (logs in $dir)" >&2
# CMD runs in the background and is waited for with `wait`, which a signal
# interrupts: SIGINT or SIGTERM (`timeout`, Ctrl-C) stops CMD and then the
# control plane at once, instead of after CMD finishes.
cmd_pid=""
trap '[ -z "$cmd_pid" ] || stop_bounded 10 "$cmd_pid"; exit 130' INT TERM
if [ $# -gt 0 ]; then
  "$@" &
  cmd_pid=$!
  rc=0; wait "$cmd_pid" || rc=$?
  cmd_pid=""
  exit $rc
else
  while true; do sleep 3600 & wait $! || true; done
fi
