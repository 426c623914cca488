# syntax=docker/dockerfile:1
#
# The tidemark image: a static binary of ./cmd/tidemark on a distroless base
# (no shell, no package manager), run as a non-root user.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) --build-arg BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t tidemark .
#   docker run --rm -p 8080:8080 -p 9464:9464 tidemark
#
# deploy/check parses this file and builds the binary with the same go build
# command line (docs/deploying.md, "The image").

# The builder runs on the build machine's platform and cross-compiles for
# the target's (docker buildx build --platform linux/amd64,linux/arm64).
# Its Go release is go.mod's go line.
FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
# VERSION, COMMIT and BUILD_DATE are what `tidemark version`, /healthz and
# tidemark_build_info name: the release, its commit and the build's time.
ARG VERSION=devel
ARG COMMIT
ARG BUILD_DATE
# CGO_ENABLED=0: a static binary that needs no libc from the base image.
# -trimpath: no build machine paths in the binary. -buildvcs=false: the
# context has no .git (.dockerignore); VERSION and COMMIT name the build
# instead.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.built=${BUILD_DATE}" -o /out/tidemark ./cmd/tidemark

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tidemark /usr/local/bin/tidemark
# nonroot (65532) by number, so that Kubernetes' runAsNonRoot can check it.
USER 65532:65532
# 8080: the MCP endpoint (--addr, path /mcp). 9464: the operator's listener
# (--metrics-addr: /metrics, /healthz, /readyz, /debug/sessions).
EXPOSE 8080 9464
ENTRYPOINT ["/usr/local/bin/tidemark"]
# Listen on every interface of the container; the memory store unless
# --data-dir (mount a volume) or --redis (a fleet) is added.
CMD ["serve", "--addr", "0.0.0.0:8080", "--metrics-addr", "0.0.0.0:9464"]
