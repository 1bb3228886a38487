#!/usr/bin/env bash
# Reproduces the headline experiment of docs/results.md: the shared Weka Claude Code
# sessions replayed on 8 simulated workers at concurrency 32..512 under round_robin, kv,
# kv_affinity and session_aware (Switchyard's admission defaults), plus session_aware
# with ThunderAgent's exact policy (row label "thunderagent"). Writes
# docs/results.json and docs/results-throughput.svg (or under $OUT).
#
# Environment:
#   TRACE   Weka trace directory (default ../shared/data/weka-kv-cache-tester/traces)
#   OUT     output directory (default docs)
#   LEVELS  concurrency levels (default 32,64,128,256,512)
#   EXTRA   extra flags for every run (e.g. "--host-blocks 8192")
set -euo pipefail

cd "$(dirname "$0")/.."
trace=${TRACE:-../shared/data/weka-kv-cache-tester/traces}
out=${OUT:-docs}
levels=${LEVELS:-32,64,128,256,512}
read -r -a extra <<<"${EXTRA:-}"
mkdir -p "$out" bin
go build -o bin/switchyard ./cmd/switchyard

common=(--trace "$trace" --format weka --concurrency "$levels" --workers 8 --block-size 256
	--gpu-blocks 2048 --seed 1 --steady-only "${extra[@]}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bin/switchyard replay "${common[@]}" --policies round_robin,kv,kv_affinity,session_aware --json "$tmp/policies.json"
bin/switchyard replay "${common[@]}" --policies session_aware --label thunderagent \
	--resume-on-last-worker=false --resume-oversized=false --acting-token-weight 1 --json "$tmp/thunderagent.json"
bin/switchyard replay --merge "$tmp/policies.json,$tmp/thunderagent.json" \
	--json "$out/results.json" --plot "$out/results-throughput.svg"
