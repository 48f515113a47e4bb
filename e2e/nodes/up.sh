#!/usr/bin/env bash
# A Kubernetes cluster of real nodes on this machine: the control plane of
# e2e/control-plane, and per node a kubelet and a containerd running pods
# under runc, with pod networking from Debian's CNI plugins (one bridge),
# kube-proxy (iptables) for Services and CoreDNS for cluster names.
#
#   e2e/nodes/up.sh               runs until interrupted
#   e2e/nodes/up.sh CMD [ARG...]  runs CMD inside (KUBECONFIG set), then
#                                 tears everything down, exits with CMD's status
#
# Everything runs in a network namespace of its own (made here, deleted at
# the end): the API server, kubelets, pods, Services and DNS have addresses
# on its bridge (10.244.0.0/16, Services 10.96.0.0/16) and nothing is routed
# out of it. Each node runs in a mount namespace of its own in which the
# host directories that pods mount (NODES_HOST_PATHS) are the node's own
# directories under the run directory: a hostPath on node-1 is not the one
# on node-2, as on separate machines.
#
# Environment:
#   NODES            node names (default: node-1 node-2 node-3 node-4)
#   NODES_STORAGE    nodes labelled node-role.example.com/storage=true
#                    (default: all but the last)
#   NODES_IMAGES     podman images (of e2e/image/podman.sh's store) every
#                    node gets, beside the pause image built here
#   NODES_HOST_PATHS host paths made per node (default: /var/lib/ozone /mnt/disks)
#   CP_DIR           run directory (default target/nodes/run), wiped at start
#
# Needs root. Installs containerd, runc, the CNI plugins, iptables and
# conntrack from Debian's packages when missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ "$(id -u)" != 0 ]; then echo "e2e/nodes/up.sh needs root (network and mount namespaces, cgroups)" >&2; exit 1; fi

missing=()
for pair in containerd:containerd runc:runc iptables:iptables conntrack:conntrack nsenter:util-linux; do
  command -v "${pair%%:*}" > /dev/null || missing+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
if ((${#missing[@]})); then
  echo "installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
fi

cd "$root"
source e2e/tools.sh
export KUBECTL=$E2E_BIN/kubectl
export CP_DIR=${CP_DIR:-$root/target/nodes/run}
bin=$("$root/e2e/control-plane/build.sh")
export NODES_BIN=$bin
export NODES=${NODES:-node-1 node-2 node-3 node-4}
if [ -z "${NODES_STORAGE+x}" ]; then
  read -r -a all <<< "$NODES"
  NODES_STORAGE="${all[*]:0:${#all[@]}-1}"
fi
export NODES_STORAGE
export NODES_HOST_PATHS=${NODES_HOST_PATHS:-/var/lib/ozone /mnt/disks}

# The images, saved once per image ID into target/nodes/images.
source "$root/e2e/image/podman.sh"
ensure_podman
images_dir=$root/target/nodes/images
mkdir -p "$images_dir"
pause=localhost/ozone-e2e/pause:1
if ! podman image exists "$pause"; then
  ctx=$(mktemp -d)
  cp "$bin/pause" "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$ctx/Containerfile"
  podman build -q --pull=never -t "$pause" "$ctx" > /dev/null
  rm -rf "$ctx"
fi
archives=()
for image in "$pause" ${NODES_IMAGES:-}; do
  id=$(podman image inspect --format '{{.Id}}' "$image")
  archive=$images_dir/${id:0:16}.tar
  if [ ! -f "$archive" ]; then
    echo "saving $image" >&2
    podman save -q --format docker-archive -o "$archive.tmp" "$image"
    mv "$archive.tmp" "$archive"
  fi
  archives+=("$archive")
done
# Archives of images no longer asked for (earlier builds) go.
for a in "$images_dir"/*.tar; do
  [ -f "$a" ] || continue
  [[ " ${archives[*]} " == *" $a "* ]] || rm -f "$a"
done
export NODES_ARCHIVES="${archives[*]}"
export NODES_PAUSE=$pause

# The host ends of the per-node bind mounts: empty directories on the host.
for p in $NODES_HOST_PATHS; do mkdir -p "$p"; done

netns=ozone-e2e-$(printf '%s' "$CP_DIR" | sha256sum | cut -c1-8)
ip netns del "$netns" 2> /dev/null || true
ip netns add "$netns"
# SIGTERM or SIGINT goes to the cluster (which tears itself down in order);
# the namespace goes once it has.
inner=""
trap '[ -z "$inner" ] || kill -TERM "$inner" 2> /dev/null || true' TERM INT
trap 'ip netns del "$netns" 2> /dev/null || true' EXIT
nsenter --net="/run/netns/$netns" unshare --mount --propagation slave \
  bash "$here/inside.sh" "$@" &
inner=$!
rc=0
while :; do
  wait "$inner" && rc=0 || rc=$?
  kill -0 "$inner" 2> /dev/null || break
done
exit $rc
