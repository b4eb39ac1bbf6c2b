#!/usr/bin/env bash
# The demo (infra/demo.sh) with every service and seckillctl run from the
# container image instead of target/release: podman, host network, the
# demo's environment passed through. Build the image first (make image).
#
# Usage: infra/image/demo.sh [IMAGE]   (default localhost/seckill:latest)
set -euo pipefail
cd "$(dirname "$0")/../.."
image=${1:-localhost/seckill:latest}
bin=$PWD/.data/image/bin
export CONTAINERS_CONF=$PWD/.data/image/containers.conf
podman --runtime runc image exists "$image" || { echo "no image $image: run make image first" >&2; exit 1; }
mkdir -p "$bin"
for name in seckill-edge seckill-order seckill-compensator seckillctl; do
  cat >"$bin/$name" <<WRAPPER
#!/usr/bin/env bash
# $name from $image (written by infra/image/demo.sh).
exec podman --runtime runc run --rm --network host --env-host --entrypoint /usr/local/bin/$name $image "\$@"
WRAPPER
  chmod +x "$bin/$name"
done
echo "== the demo, every service from $image ($("$bin/seckill-edge" --version))"
infra/local/up.sh
# The image listens on 0.0.0.0 (a container's own network); on the host's
# network the demo keeps to loopback.
SECKILL_HTTP_ADDR=${SECKILL_HTTP_ADDR:-127.0.0.1:8080} SECKILL_BIN=$bin infra/demo.sh
