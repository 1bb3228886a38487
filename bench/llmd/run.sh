#!/bin/sh
# Side-by-side benchmarks, Switchyard flash index vs llm-d-kv-cache v0.9.0.
# Run from bench/llmd (a nested module outside go.work).
set -e
export GOWORK=off
go test -c -o /tmp/llmd-bench.test .
T=/tmp/llmd-bench.test
$T -test.run '^$' -test.bench 'Lookup/pods=64/'   -test.benchtime 200x
$T -test.run '^$' -test.bench 'Lookup/pods=1024/' -test.benchtime 5x
$T -test.run '^$' -test.bench 'Add'               -test.benchtime 3x
$T -test.run '^$' -test.bench 'ApplyMooncake'     -test.benchtime 1x
$T -test.run '^$' -test.bench 'Memory'            -test.benchtime 1x
