#!/usr/bin/env bash
# The node side of e2e/nodes, started by e2e/control-plane/up.sh (with
# CP_BIN, CP_DIR, CP_API): one e2e/nodes/node.sh per node (containerd and a
# kubelet, in a mount namespace of its own), kube-proxy and CoreDNS. Writes
# $CP_DIR/nodes.ready once every node is Ready and cluster DNS answers.
# SIGTERM stops the nodes (each stops its pods first), then kube-proxy and
# CoreDNS.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$CP_DIR
pki=$dir/pki
pids=()
stopping=""
stop_all() {
  [ -n "$stopping" ] && return; stopping=1
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  exit 0
}
trap stop_all TERM INT

kubeconfig() { # file user cert key
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "$CP_API", certificate-authority: "$pki/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$3", client-key: "$4"}
contexts:
- name: e2e
  context: {cluster: e2e, user: $2}
current-context: e2e
KC
}
cert() { # name subject
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr" 2> /dev/null
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -out "$pki/$1.crt" 2> /dev/null
}

i=0
for n in $NODES; do
  i=$((i + 1))
  cert "$n" "/O=system:nodes/CN=system:node:$n"
  kubeconfig "$dir/$n.kubeconfig" "$n" "$pki/$n.crt" "$pki/$n.key"
  labels=""
  for s in $NODES_STORAGE; do [ "$s" = "$n" ] && labels=node-role.example.com/storage=true; done
  NODE_NAME=$n NODE_INDEX=$i NODE_IP=10.244.0.$((10 + i)) NODE_LABELS=$labels \
    unshare --mount --propagation slave bash "$here/node.sh" > "$dir/$n.log" 2>&1 &
  pids+=($!)
done

cert kube-proxy "/CN=system:kube-proxy"
kubeconfig "$dir/kube-proxy.kubeconfig" kube-proxy "$pki/kube-proxy.crt" "$pki/kube-proxy.key"
first=${NODES%% *}
cat > "$dir/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$dir/kube-proxy.kubeconfig"}
hostnameOverride: $first
mode: iptables
clusterCIDR: 10.244.0.0/16
# Pods share one bridge and br_netfilter is not loaded: masquerading every
# Service connection brings the replies back through this namespace's NAT.
iptables: {masqueradeAll: true}
conntrack: {maxPerCore: 0}
metricsBindAddress: "127.0.0.1:10249"
healthzBindAddress: "127.0.0.1:10256"
YAML
# kube-proxy exits when its node's addresses change (a DaemonSet would
# restart it): it starts once its node has registered with its address.
export KUBECONFIG=$dir/admin.kubeconfig
kubectl=${KUBECTL:-kubectl}
for _ in $(seq 1 120); do
  [ -n "$("$kubectl" get node "$first" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}' 2> /dev/null)" ] && break
  sleep 1
done
"$CP_BIN/kube-proxy" --config "$dir/kube-proxy.yaml" > "$dir/kube-proxy.log" 2>&1 &
pids+=($!)

cat > "$dir/Corefile" <<COREFILE
.:53 {
    errors
    health 10.244.0.1:8180
    ready 10.244.0.1:8181
    cache 5
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/admin.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
COREFILE
"$CP_BIN/coredns" -conf "$dir/Corefile" > "$dir/coredns.log" 2>&1 &
pids+=($!)

count=$(wc -w <<< "$NODES")
for _ in $(seq 1 240); do
  ready=$("$kubectl" get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2> /dev/null | grep -c True || true)
  dns=$(curl -s -o /dev/null -w '%{http_code}' http://10.244.0.1:8181/ready 2> /dev/null || true)
  if [ "$ready" = "$count" ] && [ "$dns" = 200 ]; then
    touch "$dir/nodes.ready"
    echo "$count nodes Ready, DNS ready"
    break
  fi
  for p in "${pids[@]}"; do
    kill -0 "$p" 2> /dev/null || { echo "a node process (pid $p) exited" >&2; stop_all; }
  done
  sleep 1
done
[ -f "$dir/nodes.ready" ] || echo "nodes not Ready: $ready of $count Ready, DNS $dns" >&2
while true; do sleep 3600 & wait $! || true; done
