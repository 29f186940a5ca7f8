# syntax=docker/dockerfile:1
#
# One image for the three Rivulet binaries: rivulet-ingest (default command),
# rivulet-enricher and rivulet-admin. Used by docker-compose.yml; builds with BuildKit
# (the default builder of current Docker and of `docker compose`):
#
#   docker build -t rivulet .
#   docker run --rm rivulet rivulet-admin --help

# --- build -----------------------------------------------------------------------------
FROM rust:1-bookworm AS builder

# rdkafka's `cmake-build` feature compiles librdkafka from source: it needs cmake and a
# C compiler; zlib (the `libz` feature) is found through pkg-config. No TLS or SASL
# feature is enabled, so neither OpenSSL nor libcurl is needed.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# Only what cargo reads, so that edits to the SDK, scripts or docs do not invalidate
# the build. Every workspace member must be here (cargo loads all their manifests).
COPY Cargo.toml Cargo.lock ./
COPY common ./common
COPY admin ./admin
COPY ingest ./ingest
COPY enrichment ./enrichment
COPY enricher ./enricher
COPY tests ./tests
COPY bench ./bench
COPY compat ./compat

# The registry and target dir live in BuildKit cache mounts, so a rebuild after a code
# change recompiles only the workspace crates, not librdkafka and the dependencies. The
# target dir is not part of the image, hence the copy to /out in the same step. The
# --bin filters leave out the packages' other binaries (benchmarks and the like).
RUN --mount=type=cache,id=rivulet-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=rivulet-cargo-git,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,id=rivulet-target,target=/src/target,sharing=locked \
    cargo build --release --locked \
      -p rivulet-ingest -p rivulet-enricher -p rivulet-admin \
      --bin rivulet-ingest --bin rivulet-enricher --bin rivulet-admin \
 && mkdir -p /out \
 && cp target/release/rivulet-ingest target/release/rivulet-enricher target/release/rivulet-admin /out/

# --- user-agent rules ------------------------------------------------------------------
# uap-core's regexes.yaml (Apache-2.0) at the revision pinned in scripts/versions.env,
# regenerated from PyPI's ua-parser-builtins wheel by the same script scripts/stack uses
# (which reads the pin from versions.env beside its folder).
FROM python:3.12-slim-bookworm AS uap-core
COPY scripts/versions.env /uap/versions.env
COPY scripts/uap-core/ /uap/uap-core/
RUN bash /uap/uap-core/install /out

# --- runtime ---------------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime

# ca-certificates for HTTPS endpoints (e.g. a hosted ClickHouse); curl for healthchecks.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 rivulet \
 && useradd --system --uid 10001 --gid rivulet --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin rivulet \
 && mkdir -p /data/geo

COPY --from=uap-core /out/ /usr/share/rivulet/uap-core/
COPY --from=builder /out/ /usr/local/bin/

# Fail the build, not the first start, if a binary needs a library this image lacks.
RUN for b in rivulet-ingest rivulet-enricher rivulet-admin; do \
      if ldd "/usr/local/bin/$b" | grep -q 'not found'; then ldd "/usr/local/bin/$b"; exit 1; fi; \
    done

ENV UA_REGEXES=/usr/share/rivulet/uap-core/regexes.yaml \
    INGEST_ADDR=0.0.0.0:3000 \
    ENRICHER_ADDR=0.0.0.0:3001

LABEL org.opencontainers.image.title="rivulet" \
      org.opencontainers.image.description="Rivulet analytics ingestion: rivulet-ingest, rivulet-enricher, rivulet-admin" \
      org.opencontainers.image.licenses="Apache-2.0"

USER 10001:10001
WORKDIR /
# 3000: rivulet-ingest (HTTP API). 3001: rivulet-enricher (health and metrics).
EXPOSE 3000 3001
CMD ["rivulet-ingest"]
