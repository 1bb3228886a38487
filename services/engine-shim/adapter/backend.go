package adapter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"switchyard.dev/pkg/engineevents"
	"switchyard.dev/pkg/kv"
)

// Sink receives the Switchyard events of each engine batch, in order. It is
// called from one goroutine at a time, under the lock Snapshot also holds,
// and must not block for long. The slice is the sink's to keep.
type Sink func(events []kv.Event)

// Backend is one real engine (vLLM or SGLang) seen through its HTTP server,
// its KV event publisher and its metrics.
type Backend struct {
	cfg  Config
	log  *slog.Logger
	sink Sink

	// mu orders every mapper change and its hand-off to the sink, so a
	// snapshot taken under it is consistent with the events published.
	mu     sync.Mutex
	mapper *engineevents.Mapper

	hints hintBook

	metricsMu sync.Mutex
	scraped   scrape
	// warnedBlockSize: the warning that the engine reports no block size
	// for the block-count flags was given.
	warnedBlockSize atomic.Bool

	stats counters
}

// counters are the adapter's own health figures (see Stats).
type counters struct {
	batches, events, malformed, unknown, badBatches, badFrames atomic.Uint64
	duplicates, gaps, replays, replayFailures, resyncs         atomic.Uint64
	restarts, reconnects, scrapes, scrapeErrors                atomic.Uint64
	retentionDropped                                           atomic.Uint64
}

// Stats is a copy of the adapter's counters.
type Stats struct {
	Batches, Events     uint64 // engine batches and events applied
	MalformedEvents     uint64 // events skipped as undecodable
	UnknownEvents       uint64 // events of unknown type or medium, skipped
	BadBatches          uint64 // payloads whose envelope was damaged
	BadFrames           uint64 // ZMQ messages not shaped topic|seq|payload
	Duplicates          uint64 // batches already applied (sequence not new)
	Gaps                uint64 // sequence jumps seen
	Replays             uint64 // replays that filled a gap
	ReplayFailures      uint64 // replays that could not fill it
	Resyncs             uint64 // rank states dropped and rebuilt
	PublisherRestarts   uint64 // sequence went backwards
	Reconnects          uint64 // subscriber connections re-established
	Scrapes, ScrapeErrs uint64
	RetentionDropped    uint64 // requests whose retention the engine cannot take
	Mapper              engineevents.MapperStats
	MappedBlocks        int
}

// New returns a Backend; Run starts its loops. sink may be nil (events are
// then mapped but dropped), log nil means slog.Default().
func New(cfg Config, sink Sink, log *slog.Logger) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if sink == nil {
		sink = func([]kv.Event) {}
	}
	return &Backend{
		cfg:    cfg,
		log:    log.With("engine", string(cfg.Engine)),
		sink:   sink,
		mapper: engineevents.NewMapper(engineevents.MapperConfig{BlockSize: cfg.BlockSize}),
		hints:  hintBook{sessions: map[string]retention{}},
	}, nil
}

// Config returns the effective configuration.
func (b *Backend) Config() Config { return b.cfg }

// Run follows every DP rank's event publisher and scrapes metrics until ctx
// is done. Connection failures are retried, never returned.
func (b *Backend) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if b.cfg.EventsEndpoint != "" {
		for r := range b.cfg.DPSize {
			wg.Go(func() { b.follow(ctx, r) })
		}
	}
	wg.Go(func() { b.scrapeLoop(ctx) })
	wg.Wait()
	return nil
}

// apply maps one decoded batch of a rank and hands the result to the sink.
func (b *Backend) apply(rank int, batch *engineevents.Batch) {
	b.stats.batches.Add(1)
	b.stats.events.Add(uint64(len(batch.Events)))
	b.stats.malformed.Add(uint64(batch.Malformed))
	b.stats.unknown.Add(uint64(batch.Unknown))
	if batch.FirstErr != nil {
		b.log.Debug("skipped engine events", "rank", rank, "malformed", batch.Malformed, "unknown", batch.Unknown, "first", batch.FirstErr)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	batch.DPRank = int64(rank) // the socket says which rank; old publishers leave it nil
	// A fresh slice per batch: the sink may keep it.
	if out := b.mapper.Apply(batch, nil); len(out) > 0 {
		b.sink(out)
	}
}

// resync drops what is known about a rank: its blocks are reported removed
// (Cleared when it held all of them) and rebuilt from the events that follow.
func (b *Backend) resync(rank int, why string) {
	b.stats.resyncs.Add(1)
	b.log.Warn("resynchronising KV events", "rank", rank, "reason", why)
	b.mu.Lock()
	defer b.mu.Unlock()
	if out := b.mapper.ApplyEvent(&engineevents.Event{Type: engineevents.AllBlocksCleared}, int64(rank), nil); len(out) > 0 {
		b.sink(out)
	}
}

// Snapshot calls f with every block the engine holds, as Stored events, while
// no batch can be published: what f records alongside (a sequence number)
// is consistent with it.
func (b *Backend) Snapshot(f func(events []kv.Event)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b.mapper.Snapshot())
}

// Stats returns the adapter's counters.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	ms, n := b.mapper.Stats(), b.mapper.Len()
	b.mu.Unlock()
	c := &b.stats
	return Stats{
		Batches: c.batches.Load(), Events: c.events.Load(),
		MalformedEvents: c.malformed.Load(), UnknownEvents: c.unknown.Load(),
		BadBatches: c.badBatches.Load(), BadFrames: c.badFrames.Load(),
		Duplicates: c.duplicates.Load(), Gaps: c.gaps.Load(),
		Replays: c.replays.Load(), ReplayFailures: c.replayFailures.Load(),
		Resyncs: c.resyncs.Load(), PublisherRestarts: c.restarts.Load(),
		Reconnects: c.reconnects.Load(),
		Scrapes:    c.scrapes.Load(), ScrapeErrs: c.scrapeErrors.Load(),
		RetentionDropped: c.retentionDropped.Load(),
		Mapper:           ms, MappedBlocks: n,
	}
}

var errIdle = errors.New("no message within the idle window")
