#!/usr/bin/env bash
# Builds the pinned control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler), the node side (kubelet,
# kube-proxy, CoreDNS, the pod sandbox's pause) and the fake kubelet from this Go
# module into target/control-plane/<stamp>/bin, once: a cache hit (same
# go.mod, go.sum and sources) builds nothing. Prints the bin directory.
#
# KUBEBUILDER_ASSETS (the envtest convention), when set, supplies etcd and
# kube-apiserver; what it lacks is built here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
k8s_version=$(awk '$1 == "k8s.io/kubernetes" || ($1 == "require" && $2 == "k8s.io/kubernetes") {print $NF}' "$here/go.mod" | head -1)
stamp=$(cat "$here/go.mod" "$here/go.sum" "$here"/cmd/*/*.go "$here/build.sh" | sha256sum | cut -c1-16)
bin="$root/target/control-plane/$stamp/bin"
want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns pause fake-kubelet)
missing=()
for b in "${want[@]}"; do
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/$b" ]; then
    mkdir -p "$bin"; ln -sf "$KUBEBUILDER_ASSETS/$b" "$bin/$b"
  elif [ ! -x "$bin/$b" ]; then
    missing+=("$b")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  minor=${k8s_version#v1.}; minor=${minor%%.*}
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  done
  pkgs=()
  for b in "${missing[@]}"; do
    case $b in
      etcd) pkgs+=(go.etcd.io/etcd/server/v3) ;;
      fake-kubelet) pkgs+=(./cmd/fake-kubelet) ;;
      coredns) pkgs+=(./cmd/coredns) ;;
      pause) pkgs+=(./cmd/pause) ;;
      *) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
    esac
  done
  mkdir -p "$bin.tmp"
  start=$(date +%s)
  echo "building ${missing[*]} ($k8s_version) into $bin" >&2
  (cd "$here" && go build -mod=readonly -trimpath -ldflags="$ld" -o "$bin.tmp/" "${pkgs[@]}")
  # go build names etcd's main package after go.etcd.io/etcd/server/v3.
  if [ -x "$bin.tmp/server" ]; then mv "$bin.tmp/server" "$bin.tmp/etcd"; fi
  mkdir -p "$bin"
  mv "$bin.tmp"/* "$bin/"
  rmdir "$bin.tmp"
  echo "built in $(( $(date +%s) - start )) s" >&2
fi
echo "$bin"
