#!/usr/bin/env bash
# Installs the code generators at pinned versions into ./bin, so that
# scripts/gen.sh reproduces gen/ byte for byte on any machine, and grpcurl and helm.
set -euo pipefail
cd "$(dirname "$0")/.."

export GOBIN="$PWD/bin"
export GOFLAGS=-mod=mod
# Outside the workspace: the tools' own go.mod files decide their dependencies.
export GOWORK=off

BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
GRPC_GATEWAY_VERSION=v2.33.0
GRPCURL_VERSION=v1.9.3 # compose-smoke's mutual TLS checks, the README's examples
HELM_VERSION=v3.22.0   # helm lint of deploy/helm/switchyard (scripts/test.sh)

install() {
  echo "tools: go install $1"
  go install "$1"
}

install github.com/bufbuild/buf/cmd/buf@${BUF_VERSION}
install google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}
install google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}
install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@${GRPC_GATEWAY_VERSION}
install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@${GRPC_GATEWAY_VERSION}
install github.com/fullstorydev/grpcurl/cmd/grpcurl@${GRPCURL_VERSION}
install helm.sh/helm/v3/cmd/helm@${HELM_VERSION}
