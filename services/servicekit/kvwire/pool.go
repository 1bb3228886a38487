package kvwire

import (
	"fmt"

	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
)

// PoolLayoutToProto maps a shared pool's object layout to the wire.
func PoolLayoutToProto(l kvpool.Layout) *kvpoolv1.Layout {
	return &kvpoolv1.Layout{TpSize: uint32(max(l.TPSize, 1)), KeyPrefix: l.KeyPrefix}
}

// PoolLayoutFromProto reads a layout from the wire; it fails on one the pool
// could not have (no ranks, too many, a bad prefix).
func PoolLayoutFromProto(p *kvpoolv1.Layout) (kvpool.Layout, error) {
	if p == nil || p.GetTpSize() == 0 || p.GetTpSize() > kvpool.MaxTPSize {
		return kvpool.Layout{}, fmt.Errorf("kvwire: pool layout with TP size %d", p.GetTpSize())
	}
	l := kvpool.Layout{TPSize: int(p.GetTpSize()), KeyPrefix: p.GetKeyPrefix()}
	return l, l.Validate()
}

// PoolEventToProto maps one pool event to the wire, its object as a
// Mooncake-style key.
func PoolEventToProto(l kvpool.Layout, ev kvpool.Event) *kvpoolv1.PoolEvent {
	t := kvpoolv1.PoolEventType_POOL_EVENT_TYPE_STORED
	if ev.Kind == kv.Removed {
		t = kvpoolv1.PoolEventType_POOL_EVENT_TYPE_REMOVED
	}
	return &kvpoolv1.PoolEvent{Sequence: ev.Seq, Type: t, ObjectKey: l.Key(ev.Object)}
}

// PoolEventFromProto reads one pool event; it fails on an unknown type or a
// key that is not one of the layout's.
func PoolEventFromProto(l kvpool.Layout, p *kvpoolv1.PoolEvent) (kvpool.Event, error) {
	ev := kvpool.Event{Seq: p.GetSequence()}
	switch p.GetType() {
	case kvpoolv1.PoolEventType_POOL_EVENT_TYPE_STORED:
		ev.Kind = kv.Stored
	case kvpoolv1.PoolEventType_POOL_EVENT_TYPE_REMOVED:
		ev.Kind = kv.Removed
	default:
		return ev, fmt.Errorf("kvwire: pool event %d of type %v", p.GetSequence(), p.GetType())
	}
	o, err := l.ParseKey(p.GetObjectKey())
	ev.Object = o
	return ev, err
}
