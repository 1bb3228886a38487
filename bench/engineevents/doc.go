// Package engineevents benchmarks Switchyard's engine KV event decoder
// (pkg/engineevents) side by side with llm-d's vLLM adapter
// (github.com/llm-d/llm-d-kv-cache v0.9.0, pkg/kvevents/engineadapter) on the
// same msgpack payloads. It is a nested module, outside go.work, so that the
// production modules never depend on llm-d's dependency tree (Kubernetes,
// OpenTelemetry, Redis). Run with GOWORK=off.
package engineevents
