// Package kv holds the vocabulary every Switchyard core shares about KV cache
// blocks: the storage tiers a block can live on and the events engines emit
// when blocks are stored, removed or cleared.
//
// It must stay free of behaviour: engines produce these values, indexers consume
// them, and the services translate them to and from protobuf at their edges.
package kv
