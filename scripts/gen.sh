#!/usr/bin/env bash
# Regenerates gen/ from proto/ with the pinned plugins in ./bin (installed by
# scripts/tools.sh). The output is committed and must never be edited by hand;
# scripts/test.sh fails if running this script changes anything.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in buf protoc-gen-go protoc-gen-go-grpc protoc-gen-grpc-gateway protoc-gen-openapiv2; do
  if [ ! -x "bin/$tool" ]; then
    echo "gen: bin/$tool is missing; run scripts/tools.sh" >&2
    exit 1
  fi
done

# Start from nothing so files of deleted protos disappear too; keep go.mod/go.sum.
find gen -mindepth 1 -maxdepth 1 ! -name go.mod ! -name go.sum -exec rm -rf {} +
PATH="$PWD/bin:$PATH" bin/buf generate

# protoc-gen-openapiv2 writes a document for every file; keep only those that
# describe a service (files of shared message types have no paths).
grep -l '"paths": {}' -r gen/openapi | xargs -r rm --
find gen/openapi -type d -empty -delete
