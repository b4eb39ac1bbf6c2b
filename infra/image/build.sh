#!/usr/bin/env bash
# Builds the project's image (the Dockerfile at the root) with podman, on a
# machine with no Docker engine and no registry: the two bases the
# Dockerfile names are made locally and passed as build arguments.
#
#   runtime  a distroless-cc stand-in assembled from Debian's own packages
#            (libc6, libgcc-s1, ca-certificates, tzdata; passwd and group
#            files naming nonroot 65532): no shell, no package manager.
#   builder  Debian bookworm (debootstrap, buildd variant) with this
#            machine's Rust toolchain copied in, laid out as the official
#            rust image is (CARGO_HOME=/usr/local/cargo on PATH).
#
# Where a registry is reachable none of this is needed:
#   docker build --build-arg SECKILL_GIT_COMMIT=$(git rev-parse --short=12 HEAD) -t seckill .
#
# Usage: infra/image/build.sh [TAG]   (default localhost/seckill:latest)
# The bases are made once and kept; SECKILL_IMAGE_REBASE=1 makes them again.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-localhost/seckill:latest}
work=$PWD/.data/image
mirror=http://deb.debian.org/debian
suite=bookworm
runtime_base=localhost/seckill-runtime-base:$suite
builder_base=localhost/seckill-builder-base:$suite
mkdir -p "$work"

missing=()
for package in podman runc debootstrap; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# crun cannot set rlimits or use the hybrid cgroups here; runc can, without
# default ulimits. Host networking: the build reaches the registries.
printf '[containers]\ndefault_ulimits = []\n' >"$work/containers.conf"
export CONTAINERS_CONF=$work/containers.conf
podman() { command podman --runtime runc "$@"; }

have_image() { [[ ${SECKILL_IMAGE_REBASE:-0} != 1 ]] && podman image exists "$1"; }

make_runtime_base() {
  local root=$work/runtime-root debs=$work/runtime-debs
  rm -rf "$root" "$debs"
  mkdir -p "$root"/{etc,tmp,home/nonroot} "$debs"
  (cd "$debs" && apt-get download libc6 libgcc-s1 ca-certificates tzdata >/dev/null)
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$root"; done
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
  chown 65532:65532 "$root/home/nonroot"
  # ca-certificates installs its source files; the bundle is made by its
  # postinst, which cannot run without a shell: make it here.
  find "$root/usr/share/ca-certificates" -name '*.crt' -exec cat {} + >"$root/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$root"/usr/share/{doc,man,lintian}
  tar -C "$root" -c . | podman import --change 'USER 65532:65532' - "$runtime_base" >/dev/null
}

make_builder_base() {
  local root=$work/builder-root toolchain
  toolchain=$(rustc --print sysroot)
  rm -rf "$root"
  debootstrap --variant=buildd --include=ca-certificates "$suite" "$root" "$mirror" >"$work/debootstrap.log"
  mkdir -p "$root/usr/local/rust" "$root/usr/local/cargo/bin"
  cp -a "$toolchain"/{bin,lib,libexec} "$root/usr/local/rust/"
  for tool in "$root"/usr/local/rust/bin/*; do ln -s "../../rust/bin/${tool##*/}" "$root/usr/local/cargo/bin/"; done
  # The build fetches crates and Debian packages: it trusts what this host
  # trusts (where egress passes a TLS-inspecting proxy, its CA).
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$root" update-ca-certificates >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | podman import \
    --change 'ENV CARGO_HOME=/usr/local/cargo' \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$builder_base" >/dev/null
}

have_image "$runtime_base" || { echo "image: making $runtime_base"; make_runtime_base; }
have_image "$builder_base" || { echo "image: making $builder_base (debootstrap, a few minutes)"; make_builder_base; }

commit=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
echo "image: building $tag at $commit"
podman build --network host --layers \
  --build-arg RUST_IMAGE="$builder_base" \
  --build-arg RUNTIME_IMAGE="$runtime_base" \
  --build-arg SECKILL_GIT_COMMIT="$commit" \
  -t "$tag" .
podman image ls "$tag"
