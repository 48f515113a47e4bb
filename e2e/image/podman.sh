# Sourced: podman as it works on these machines (runc, cgroupfs, explicit
# ulimits; see containers.conf), installed from Debian's packages if missing.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/containers.conf}"

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
