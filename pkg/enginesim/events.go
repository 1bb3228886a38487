package enginesim

import "switchyard.dev/pkg/kv"

// eventLog accumulates the KV events of one engine call, merging adjacent
// changes into as few events as keep their meaning: consecutive removals on a
// tier become one Removed, and a Stored block that extends the previous
// Stored chain (same tier, same session) joins it.
type eventLog struct {
	// events are this call's events: a window at the free end of chunk, or
	// an array of their own once they outgrew it.
	events []kv.Event
	// chunk hands out the event arrays, so a step does not allocate (and
	// regrow) one: its length is what earlier calls took, the rest is free.
	// A taken window has its capacity clipped, so it is never written again.
	chunk []kv.Event
	// arena hands out the one-block slices new events start with, so a
	// decode step does not allocate once per filled block. Each slice has
	// its capacity clipped: growing an event copies it out of the arena.
	arena []kv.BlockHash
}

// eventChunk is how many events one chunk holds (64 KiB): a decode step with
// a full batch emits a few dozen.
const eventChunk = 1024

func (l *eventLog) one(h kv.BlockHash) []kv.BlockHash {
	if len(l.arena) == cap(l.arena) {
		l.arena = make([]kv.BlockHash, 0, 256)
	}
	l.arena = append(l.arena, h)
	n := len(l.arena)
	return l.arena[n-1 : n : n]
}

// grow appends h to ev's blocks, in place when they end at the arena's tail
// (the common case: the last event growing while nothing else was added).
func (l *eventLog) grow(ev *kv.Event, h kv.BlockHash) {
	n, m := len(l.arena), len(ev.Blocks)
	if n > 0 && n < cap(l.arena) && m > 0 && &ev.Blocks[m-1] == &l.arena[n-1] {
		l.arena = append(l.arena, h)
		ev.Blocks = l.arena[n-m : n+1 : n+1]
		return
	}
	ev.Blocks = append(ev.Blocks, h)
}

func (l *eventLog) add(ev kv.Event) {
	if l.events == nil {
		if cap(l.chunk)-len(l.chunk) < 16 {
			l.chunk = make([]kv.Event, 0, eventChunk)
		}
		l.events = l.chunk[len(l.chunk):len(l.chunk)]
	}
	l.events = append(l.events, ev)
}

func (l *eventLog) stored(t kv.Tier, parent, h kv.BlockHash, session string) {
	if n := len(l.events); n > 0 {
		ev := &l.events[n-1]
		if ev.Kind == kv.Stored && ev.Tier == t && ev.SessionID == session && ev.Blocks[len(ev.Blocks)-1] == parent {
			l.grow(ev, h)
			return
		}
	}
	l.add(kv.Event{Kind: kv.Stored, Tier: t, Parent: parent, Blocks: l.one(h), SessionID: session})
}

func (l *eventLog) removed(t kv.Tier, h kv.BlockHash) {
	if n := len(l.events); n > 0 {
		ev := &l.events[n-1]
		if ev.Kind == kv.Removed && ev.Tier == t {
			l.grow(ev, h)
			return
		}
	}
	l.add(kv.Event{Kind: kv.Removed, Tier: t, Blocks: l.one(h)})
}

func (l *eventLog) cleared() {
	l.add(kv.Event{Kind: kv.Cleared})
}

// take hands the accumulated events to the caller and starts afresh.
func (l *eventLog) take() []kv.Event {
	ev := l.events
	l.events = nil
	n := len(ev)
	if n == 0 {
		return ev
	}
	if k := len(l.chunk); n <= cap(l.chunk)-k && &ev[0] == &l.chunk[:k+1][k] {
		l.chunk = l.chunk[:k+n] // still in the chunk: that window is taken
	}
	return ev[:n:n]
}
