# Sourced: podman as it works on these machines (runc, cgroupfs, explicit
# ulimits; see containers.conf), installed from Debian's packages if missing.
#
# Every podman call of the repo's scripts uses a store of the checkout's own,
# target/podman (images, containers, podman's run and temporary state), never
# the machine's default store. A clean clone starts with it empty, so every
# CI run takes the path a fresh machine takes (the Debian base made with
# debootstrap, about 30 s): nothing left in the machine's store by an earlier
# run can make a run pass here that would fail on a new machine.
# PODMAN_STORE=DIR puts the store elsewhere.
_podman_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_podman_root=$(cd "$_podman_here/../.." && pwd)
PODMAN_STORE=${PODMAN_STORE:-$_podman_root/target/podman}
mkdir -p "$PODMAN_STORE/storage" "$PODMAN_STORE/run" "$PODMAN_STORE/tmp"
# storage.conf and containers.conf are written here, from the committed
# containers.conf, each run: they name absolute paths of this checkout.
cat > "$PODMAN_STORE/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$PODMAN_STORE/storage"
runroot = "$PODMAN_STORE/run"
EOF
{
  cat "$_podman_here/containers.conf"
  printf '\n# Added by e2e/image/podman.sh: state of this checkout only.\n'
  printf 'tmp_dir = "%s"\n' "$PODMAN_STORE/tmp"
} > "$PODMAN_STORE/containers.conf"
export CONTAINERS_STORAGE_CONF="$PODMAN_STORE/storage.conf"
export CONTAINERS_CONF="$PODMAN_STORE/containers.conf"
export PODMAN_STORE

ensure_podman() {
  local missing=()
  command -v podman > /dev/null || missing+=(podman)
  command -v runc > /dev/null || missing+=(runc)
  command -v debootstrap > /dev/null || missing+=(debootstrap)
  if ((${#missing[@]})); then
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
  fi
}
