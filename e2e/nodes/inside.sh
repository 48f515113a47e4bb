#!/usr/bin/env bash
# Runs in the network and mount namespaces e2e/nodes/up.sh made: the bridge,
# the node addresses, then the control plane (e2e/control-plane/up.sh with
# real nodes, e2e/nodes/nodes.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# What containerd and runc keep under /run (pod network namespaces, shim
# sockets) stays in this mount namespace: private tmpfs over the host's.
mkdir -p /run/netns /run/containerd
mount -t tmpfs -o mode=0755 ozone-e2e /run/netns
mount -t tmpfs -o mode=0711 ozone-e2e /run/containerd
ip link set lo up
ip link add oz0 type bridge
ip addr add 10.244.0.1/16 dev oz0
ip link set oz0 up
i=0
for n in $NODES; do
  i=$((i + 1))
  ip addr add "10.244.0.$((10 + i))/16" dev oz0
done
sysctl -qw net.ipv4.ip_forward=1
# The nodes stop their pods and containerd within their own limits.
export CP_ADDRESS=10.244.0.1 CP_KUBELETS=real CP_CLIENT_GRACE=90
exec bash "$here/../control-plane/up.sh" "$@"
