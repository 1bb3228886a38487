#!/usr/bin/env bash
# Fault suite and soak (internal/faultsuite, build tag "faults"): builds bin/switchyard
# once, then runs the mesh as separate processes on loopback (`switchyard serve
# <service>`, four simulated workers), injects every fault of docs/reliability.md's table
# under eight multi-turn streaming sessions, and soaks it with 200 concurrent streams.
# Prints the fault table (markdown, for docs/reliability.md) and the soak's RSS and
# goroutine figures. Then the replicated mesh (3 schedulers, 2 frontends, 2 flash
# indexers, 4 shims): kill -9 of one of each, the replica table (docs/scale-out.md).
# Fails if a turn is lost before its first byte, a recovery takes
# longer than 2 s, a stale index entry outlives its bound, the soak sees an error, or a
# process grows. Every process's log is kept for reading afterwards.
#
# Usage: scripts/faults.sh [go test flags, e.g. -run TestFaults]
#
# Environment:
#   FAULTS_SOAK=30s             soak duration (Go duration; default 2m; 0 skips the soak)
#   FAULTS_SOAK_STREAMS=N       concurrent soak streams (default 200)
#   FAULTS_ONLY=text            run only the faults whose name contains text
#   FAULTS_STRICT_MIDSTREAM=0   do not fail on streams broken after their first byte
#                               (mid-stream migration should leave none; default: fail)
#   FAULTS_OUT=file             where the fault table goes (default: under FAULTS_LOGS)
#   FAULTS_REPLICAS_OUT=file    where the replica failover table goes (likewise)
#   FAULTS_LOGS=dir             where the processes' logs go (default: a new temp dir)
set -euo pipefail

cd "$(dirname "$0")/.."
start=$SECONDS

echo "faults.sh: building bin/switchyard"
mkdir -p bin
CGO_ENABLED=0 go build -o bin/switchyard ./cmd/switchyard
# scripts/test.sh vets the package without the tag; the tagged tests are vetted here.
go vet -tags faults ./internal/faultsuite

export FAULTS_BIN="$PWD/bin/switchyard"
export FAULTS_LOGS=${FAULTS_LOGS:-$(mktemp -d -t switchyard-faults-XXXXXX)}
export FAULTS_OUT=${FAULTS_OUT:-$FAULTS_LOGS/faults.md}
export FAULTS_REPLICAS_OUT=${FAULTS_REPLICAS_OUT:-$FAULTS_LOGS/replicas.md}
echo "faults.sh: logs in $FAULTS_LOGS"

status=0
# The tests run one after the other (faults, then soak), each with its own mesh. The
# timeout is a backstop well past the suite's ~4 minutes.
go test -tags faults -count=1 -v -timeout 9m "$@" ./internal/faultsuite || status=$?

for table in "$FAULTS_OUT" "$FAULTS_REPLICAS_OUT"; do
	if [ -s "$table" ]; then
		echo
		echo "faults.sh: $(basename "$table" .md) table ($table):"
		cat "$table"
	fi
done
echo "faults.sh: done in $((SECONDS - start))s (exit $status); logs in $FAULTS_LOGS"
exit "$status"
