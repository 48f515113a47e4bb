#!/usr/bin/env bash
# Builds the runtime image on this machine, with no registry: the `local`
# target of the Containerfile over the release binaries built here
# (`cargo build --profile dist`), on a Debian base made from Debian's
# packages when it is not already in the checkout's podman store
# (target/podman, see podman.sh: empty in a clean clone, so a CI run always
# makes it). Installs podman, runc and debootstrap when missing. Prints the
# image name, its size and the time the base took.
#
#   e2e/image/build.sh            # builds ghcr.io/ozone-rs/ozone:<version>
#   OZONE_IMAGE=name:tag e2e/image/build.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source e2e/image/podman.sh

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
image=${OZONE_IMAGE:-ghcr.io/ozone-rs/ozone:$version}
base=docker.io/library/debian:bookworm-slim

ensure_podman

if ! podman image exists "$base"; then
  # What the Debian slim images are: minbase without documentation,
  # manuals, translations and package caches.
  base_start=$SECONDS
  mkdir -p target/image
  root=target/image/rootfs
  rm -rf "$root"
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null)}
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "making $base with debootstrap from $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" > target/image/debootstrap.log 2>&1 ||
    { tail -20 target/image/debootstrap.log; exit 1; }
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{man,info,locale,groff,lintian,linda}/* \
         "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
         "$root"/var/lib/apt/lists/* "$root"/var/log/* "$root"/tmp/*
  tar -C "$root" -c . | podman import -q --change 'CMD ["bash"]' - "$base" > /dev/null
  rm -rf "$root"
  echo "made $base in $((SECONDS - base_start)) s"
fi

cargo build --profile dist --locked --bin ozone --bin ozone-operator
# The Hadoop FileSystem jar the image carries (hadoop-fs/test.sh builds and
# tests it; this only packages it when it is missing).
if [ ! -f hadoop-fs/target/ozone-hadoop-fs.jar ]; then
  (cd hadoop-fs && mvn -B -q -ntp package -DskipTests)
fi
podman build -q --pull=never --target local --build-arg "VERSION=$version" \
  -t "$image" -f Containerfile . > /dev/null
# The image this replaced, now untagged.
podman image prune -f > /dev/null
size=$(podman image inspect --format '{{.Size}}' "$image")
base_size=$(podman image inspect --format '{{.Size}}' "$base")
echo "built $image: $((size / 1000000)) MB ($((base_size / 1000000)) MB Debian base," \
  "$(($(stat -c %s target/dist/ozone) / 1000000)) MB ozone," \
  "$(($(stat -c %s target/dist/ozone-operator) / 1000000)) MB ozone-operator)"
