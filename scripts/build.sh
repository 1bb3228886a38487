#!/usr/bin/env bash
# Builds static binaries into dist/: one per service (dist/<service>, from
# services/<service>/cmd/<service>) and the CLI (dist/switchyard, from ./cmd/switchyard).
# They are what the FROM-scratch images copy, so: no cgo, no paths of this machine.
#
# Usage: scripts/build.sh [service ...]   (default: every service and the CLI)
set -euo pipefail

cd "$(dirname "$0")/.."

SERVICES=(frontend scheduler flash-indexer session-prefix-indexer kvhint-emitter engine-shim kv-pool)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	targets=("${SERVICES[@]}" switchyard)
fi

# pkg_dir NAME: the package directory of a target.
pkg_dir() {
	if [ "$1" = switchyard ]; then
		echo "./cmd/switchyard"
	else
		echo "./services/$1/cmd/$1"
	fi
}

# Fail before building anything if a target has no main package: a missing binary
# would otherwise only show up as a broken image much later.
missing=()
for t in "${targets[@]}"; do
	dir=$(pkg_dir "$t")
	if ! ls "$dir"/*.go >/dev/null 2>&1; then
		missing+=("$t ($dir)")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "build.sh: no Go package for: ${missing[*]}" >&2
	exit 1
fi

mkdir -p dist
export CGO_ENABLED=0
for t in "${targets[@]}"; do
	dir=$(pkg_dir "$t")
	echo "build.sh: $dir -> dist/$t"
	# go.work at the root makes every module's packages buildable from here.
	go build -trimpath -ldflags "-s -w" -o "dist/$t" "$dir"
done
echo "build.sh: built ${#targets[@]} binaries in dist/"
