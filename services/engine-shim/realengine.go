package engineshim

import (
	"context"
	"errors"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/services/engine-shim/adapter"
	"switchyard.dev/services/servicekit/kvwire"
)

// newRealBackend builds the adapter for --engine vllm|sglang. Its events go
// through the driver's event log, so subscription, replay and snapshots work
// exactly as for the simulated engine.
func (s *Service) newRealBackend() error {
	acfg := s.cfg.Adapter
	acfg.Engine = adapter.Engine(s.cfg.Engine)
	acfg.WorkerID, acfg.Model, acfg.BlockSize = s.cfg.WorkerID, s.cfg.Model, s.cfg.BlockSize
	b, err := adapter.New(acfg, s.d.publishExternal, s.log)
	if err != nil {
		return err
	}
	s.real = b
	return s.srv.Registry().Register(b.Collector(s.srv.MetricName))
}

// publishExternal publishes a real engine's events as the next batch.
func (d *driver) publishExternal(evs []kv.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending = append(d.pending, evs...)
	d.publishLocked()
}

func (s *Service) runReal(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.register(ctx) }()
	return errors.Join(s.real.Run(ctx), <-errc)
}

func (s *Service) realSnapshot() *enginev1.GetKvSnapshotResponse {
	var evs []kv.Event
	var seq uint64
	// Under the adapter's lock no batch is published, so the log's last
	// sequence is the one the snapshot is consistent with.
	s.real.Snapshot(func(e []kv.Event) {
		evs = e
		s.d.mu.Lock()
		seq = s.d.log.last()
		s.d.mu.Unlock()
	})
	return &enginev1.GetKvSnapshotResponse{WorkerId: s.cfg.WorkerID, Epoch: s.epoch, Sequence: seq, Events: kvwire.EventsToProto(evs)}
}
