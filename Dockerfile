# syntax=docker/dockerfile:1
#
# Warden's images, built with Docker (BuildKit). One target per binary:
#
#   docker build --target controller    -t ghcr.io/wardenhq/warden-controller:dev .
#   docker build --target policy-server -t ghcr.io/wardenhq/warden-policy-server:dev .
#   docker build --target audit-scanner -t ghcr.io/wardenhq/warden-audit-scanner:dev .
#   docker build --target policy-syncer -t ghcr.io/wardenhq/warden-policy-syncer:dev .
#   docker build --target wardenctl     -t ghcr.io/wardenhq/wardenctl:dev .
#
# For a release add --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD),
# and with buildx --platform linux/amd64,linux/arm64. The binaries are built with the
# flags of go run ./hack/image, which builds the same images without Docker, from
# nothing and reproducibly (docs/images.md). grpcnotrace keeps gRPC from linking
# golang.org/x/net/trace, whose templates would keep every exported method in the
# binaries (about 20 MB of policy-server). A new binary under cmd/ gets a target
# like the ones below.

ARG GO_VERSION=1.26.8
# Static binaries need no libc: distroless "static" holds CA certificates, tzdata and
# /etc/passwd with the nonroot user 65532.
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH VERSION=dev
# Every binary at once: they share most packages, so one more costs little.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -tags grpcnotrace \
      -ldflags "-s -w -X github.com/wardenhq/warden/internal/buildinfo.Version=${VERSION}" \
      -o /out/ ./cmd/...

FROM ${BASE_IMAGE} AS base
ARG VERSION=dev REVISION=""
LABEL org.opencontainers.image.source="https://github.com/wardenhq/warden" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
USER 65532:65532
WORKDIR /home/nonroot

FROM base AS wardenctl
LABEL org.opencontainers.image.title="wardenctl"
COPY --from=build /out/wardenctl /wardenctl
ENTRYPOINT ["/wardenctl"]

FROM base AS controller
LABEL org.opencontainers.image.title="warden-controller"
COPY --from=build /out/controller /controller
ENTRYPOINT ["/controller"]

FROM base AS audit-scanner
LABEL org.opencontainers.image.title="warden-audit-scanner"
COPY --from=build /out/audit-scanner /audit-scanner
ENTRYPOINT ["/audit-scanner"]

FROM base AS policy-syncer
LABEL org.opencontainers.image.title="warden-policy-syncer"
COPY --from=build /out/policy-syncer /policy-syncer
ENTRYPOINT ["/policy-syncer"]

# The last stage is what docker build builds without --target.
FROM base AS policy-server
LABEL org.opencontainers.image.title="warden-policy-server"
COPY --from=build /out/policy-server /policy-server
ENTRYPOINT ["/policy-server"]
