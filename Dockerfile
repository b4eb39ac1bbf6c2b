# syntax=docker/dockerfile:1
# One image with the four binaries (seckill-edge, seckill-order,
# seckill-compensator, seckillctl); each Deployment or Compose service picks
# its command. Build:
#   docker build --build-arg SECKILL_GIT_COMMIT=$(git rev-parse --short=12 HEAD) -t seckill .
#
# The bases are arguments so that a machine without a registry can build
# from bases it made itself (infra/image/build.sh does, with podman).
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

# cargo-chef: the dependencies are built from a recipe of the manifests
# alone, so a change to the project's own code does not rebuild them.
FROM ${RUST_IMAGE} AS chef
# The workspace's release profile keeps debug info (for profiling on a
# host); the image's binaries go without it.
ENV CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=symbols
RUN cargo install cargo-chef --locked --version 0.1.78
# librdkafka is compiled from source by rdkafka-sys (cmake) and includes
# curl's headers even with curl switched off. (Unpinned: Debian's point
# releases replace the versions a pin would name.)
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake libcurl4-openssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
# --version names the commit (there is no .git in the build context).
ARG SECKILL_GIT_COMMIT=unknown
ENV SECKILL_GIT_COMMIT=${SECKILL_GIT_COMMIT}
COPY --from=planner /src/recipe.json recipe.json
RUN cargo chef cook --release --recipe-path recipe.json \
    -p seckill-edge -p seckill-order -p seckill-compensator -p seckill-ctl
COPY . .
RUN cargo build --release --locked \
    -p seckill-edge -p seckill-order -p seckill-compensator -p seckill-ctl \
 && mkdir /out \
 && cp target/release/seckill-edge target/release/seckill-order \
       target/release/seckill-compensator target/release/seckillctl /out/

# The runtime: glibc and libgcc only (the binaries link nothing else), no
# shell, no package manager, no compiler; user 65532 (nonroot).
FROM ${RUNTIME_IMAGE}
COPY --from=builder /out/ /usr/local/bin/
USER 65532:65532
ENV SECKILL_HTTP_ADDR=0.0.0.0:8080
EXPOSE 8080 9101
ENTRYPOINT ["/usr/local/bin/seckill-edge"]
