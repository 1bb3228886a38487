// Package llmd benchmarks Switchyard's flash index side by side with llm-d's
// Go KV-block index (github.com/llm-d/llm-d-kv-cache v0.9.0,
// kvblock.InMemoryIndex) on identical inputs. It is a nested module, outside
// go.work, so llm-d's dependencies (k8s, OpenTelemetry, Redis clients) never
// reach the product modules.
package llmd
