// Package faultsuite runs the Switchyard mesh as separate processes on
// loopback (`switchyard serve <service>`, one per service, four engine shims
// with simulated engines), drives it with multi-turn streaming sessions and
// injects faults: processes killed and restarted, a frontend drained, a shim
// frozen, flapping or cut off from the flash indexer, bursts. It measures
// what clients saw — turns lost before their first byte, streams broken
// after it, time to recover — and prints the figures as a markdown table
// (docs/reliability.md). A soak runs 200 concurrent streams and checks that
// no request fails and that no process grows.
//
// The tests that start processes carry the build tag "faults" and run from
// scripts/faults.sh, so `go test ./...` only runs the harness's own unit
// tests. The harness (processes, the partition proxy, the load client, the
// table) is ordinary code here so that `go vet` keeps it compiling.
//
// It must never be imported by a service: it is test machinery, it kills
// processes and reads /proc.
package faultsuite
