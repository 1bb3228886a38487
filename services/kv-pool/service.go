package kvpoolservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	kvpoolv1 "switchyard.dev/gen/switchyard/kvpool/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvpool"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// Limits on one request, so a bad client cannot make one call cost
// unbounded memory or hold the pool for long.
const maxPagesPerCall = 1 << 20

// Service is the kv-pool service.
type Service struct {
	kvpoolv1.UnimplementedKvPoolServiceServer

	cfg    Config
	log    *slog.Logger
	done   <-chan struct{}
	layout kvpool.Layout

	mu    sync.Mutex
	store *kvpool.Store
	// recent holds the last events (at most cfg.ReplayEvents, trimmed by
	// halves); recent[0] has sequence first.
	recent  []kvpool.Event
	first   uint64
	changed chan struct{} // closed and replaced whenever events are published

	events, snapshots prometheus.Counter
}

// New builds the service and registers its gRPC API, REST gateway and
// metrics on srv.
func New(cfg Config, srv *servicekit.Server) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := kvpool.Layout{TPSize: cfg.TPSize, KeyPrefix: cfg.KeyPrefix}
	store, err := kvpool.New(kvpool.Config{Layout: l, Capacity: cfg.CapacityPages * l.ObjectsPerPage(), Epoch: servicekit.NewEpoch()})
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: srv.Logger(), done: srv.Done(), layout: store.Layout(), store: store, first: 1, changed: make(chan struct{})}
	if err := s.registerMetrics(srv); err != nil {
		return nil, err
	}
	kvpoolv1.RegisterKvPoolServiceServer(srv, s)
	srv.Gateway(kvpoolv1.RegisterKvPoolServiceHandler)
	return s, nil
}

func (s *Service) registerMetrics(srv *servicekit.Server) error {
	s.events = prometheus.NewCounter(prometheus.CounterOpts{Name: srv.MetricName("events_total"), Help: "Pool events published (stored and removed objects)."})
	s.snapshots = prometheus.NewCounter(prometheus.CounterOpts{Name: srv.MetricName("snapshots_total"), Help: "Snapshots sent to subscribers that could not resume."})
	gauges := servicekit.StatsMetrics[kvpool.Stats]{Name: srv.MetricName, Stats: s.stats}
	return servicekit.RegisterMetrics(srv.Registry(), s.events, s.snapshots,
		gauges.Gauge("objects", "Objects present.", func(st kvpool.Stats) float64 { return float64(st.Objects) }),
		gauges.Gauge("complete_pages", "Pages with every object present.", func(st kvpool.Stats) float64 { return float64(st.CompletePages) }),
	)
}

func (s *Service) stats() kvpool.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store.Stats()
}

// Run has no background work: the pool reacts to calls. It returns when ctx
// is done.
func (s *Service) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// publishLocked moves the store's new events into the replay buffer and
// wakes the subscribers. It returns the last sequence number.
func (s *Service) publishLocked() uint64 {
	evs := s.store.TakeEvents()
	if len(evs) > 0 {
		s.recent = append(s.recent, evs...)
		if n := len(s.recent); n > s.cfg.ReplayEvents {
			drop := n - s.cfg.ReplayEvents/2
			s.recent = append(s.recent[:0], s.recent[drop:]...)
			s.first += uint64(drop)
		}
		s.events.Add(float64(len(evs)))
		close(s.changed)
		s.changed = make(chan struct{})
	}
	return s.store.Seq()
}

var (
	errTooMany = fmt.Errorf("more than %d pages or objects in one call", maxPagesPerCall)
	errStopped = errors.New("kv-pool is shutting down")
	errInvalid = errors.New("invalid request") // the caller's to fix
)

// errorCodes is the one table mapping the pool's errors to gRPC codes.
var errorCodes = servicekit.ErrorCodes{
	{Err: errTooMany, Code: codes.InvalidArgument},
	{Err: kvpool.ErrBadKey, Code: codes.InvalidArgument},
	{Err: errInvalid, Code: codes.InvalidArgument},
	{Err: errStopped, Code: codes.Unavailable},
	{Err: context.Canceled, Code: codes.Canceled},
	{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded},
}

func (s *Service) keys(keys []string) ([]kvpool.Object, error) {
	if len(keys) > maxPagesPerCall {
		return nil, errorCodes.Status(errTooMany)
	}
	objs := make([]kvpool.Object, len(keys))
	for i, k := range keys {
		o, err := s.layout.ParseKey(k)
		if err != nil {
			return nil, errorCodes.Status(err)
		}
		objs[i] = o
	}
	return objs, nil
}

// PutPages writes whole pages.
func (s *Service) PutPages(_ context.Context, req *kvpoolv1.PutPagesRequest) (*kvpoolv1.PutPagesResponse, error) {
	if len(req.GetPageHashes()) > maxPagesPerCall {
		return nil, errorCodes.Status(errTooMany)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range req.GetPageHashes() {
		s.store.Put(kv.BlockHash(h))
	}
	return &kvpoolv1.PutPagesResponse{Sequence: s.publishLocked()}, nil
}

// PutObjects writes single objects.
func (s *Service) PutObjects(_ context.Context, req *kvpoolv1.PutObjectsRequest) (*kvpoolv1.PutObjectsResponse, error) {
	objs, err := s.keys(req.GetObjectKeys())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.store.PutObjects(objs...); err != nil { // unreachable: keys parsed with the layout
		return nil, errorCodes.Status(fmt.Errorf("%w: %w", errInvalid, err))
	}
	return &kvpoolv1.PutObjectsResponse{Sequence: s.publishLocked()}, nil
}

// RemoveObjects deletes objects.
func (s *Service) RemoveObjects(_ context.Context, req *kvpoolv1.RemoveObjectsRequest) (*kvpoolv1.RemoveObjectsResponse, error) {
	objs, err := s.keys(req.GetObjectKeys())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint32
	for _, o := range objs {
		if s.store.Remove(o) {
			n++
		}
	}
	s.publishLocked()
	return &kvpoolv1.RemoveObjectsResponse{Removed: n}, nil
}

// GetPrefix reads a prompt's leading complete pages.
func (s *Service) GetPrefix(_ context.Context, req *kvpoolv1.GetPrefixRequest) (*kvpoolv1.GetPrefixResponse, error) {
	hs := req.GetPageHashes()
	if len(hs) > maxPagesPerCall {
		return nil, errorCodes.Status(errTooMany)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return &kvpoolv1.GetPrefixResponse{Pages: uint32(s.store.Get(kvwire.Hashes(hs)))}, nil
}

// GetStats reports layout, position and counters.
func (s *Service) GetStats(context.Context, *kvpoolv1.GetStatsRequest) (*kvpoolv1.GetStatsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.store.Stats()
	return &kvpoolv1.GetStatsResponse{
		Layout: kvwire.PoolLayoutToProto(s.layout), Epoch: s.store.Epoch(), Sequence: s.store.Seq(),
		CapacityObjects: uint64(st.Capacity), Objects: uint64(st.Objects), CompletePages: uint64(st.CompletePages),
		PagesPut: uint64(st.PagesPut), PagesAsked: uint64(st.PagesAsked), PagesHit: uint64(st.PagesHit),
		EvictedObjects: uint64(st.Evictions),
	}, nil
}

// SubscribePoolEvents streams events after the subscriber's position, or a
// snapshot and then events when that position is not in the replay buffer.
func (s *Service) SubscribePoolEvents(req *kvpoolv1.SubscribePoolEventsRequest, stream grpc.ServerStreamingServer[kvpoolv1.SubscribePoolEventsResponse]) error {
	ctx := stream.Context()
	s.mu.Lock()
	epoch := s.store.Epoch()
	next := req.GetFromSequence() + 1
	resume := req.GetEpoch() == epoch && req.GetFromSequence() > 0 && next >= s.first && next <= s.store.Seq()+1
	for {
		batch := &kvpoolv1.PoolEventBatch{Epoch: epoch}
		if !resume || next < s.first { // never resumable, or fell out of the buffer while sending
			objs := s.store.Objects()
			snap := &kvpoolv1.PoolSnapshot{Sequence: s.store.Seq(), Layout: kvwire.PoolLayoutToProto(s.layout), ObjectKeys: make([]string, len(objs))}
			for i, o := range objs {
				snap.ObjectKeys[i] = s.layout.Key(o)
			}
			batch.Snapshot = snap
			next, resume = snap.Sequence+1, true
			s.snapshots.Inc()
		}
		evs := s.recent[next-s.first:]
		if len(evs) > kvpool.MaxEventsPerBatch {
			evs = evs[:kvpool.MaxEventsPerBatch]
		}
		for _, ev := range evs {
			batch.Events = append(batch.Events, kvwire.PoolEventToProto(s.layout, ev))
		}
		next += uint64(len(evs))
		wait := s.changed
		if next <= s.store.Seq() {
			wait = nil // more to send at once
		}
		batch.CaughtUp = wait != nil
		s.mu.Unlock()
		if batch.Snapshot != nil || len(batch.Events) > 0 {
			if err := stream.Send(&kvpoolv1.SubscribePoolEventsResponse{Batch: batch}); err != nil {
				return err
			}
		}
		if wait != nil {
			select {
			case <-ctx.Done():
				return errorCodes.Status(ctx.Err())
			case <-s.done:
				return errorCodes.Status(errStopped)
			case <-wait:
			}
		}
		s.mu.Lock()
	}
}
