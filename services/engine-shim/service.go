package engineshim

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// Service is one engine shim: the gRPC service in front of its Engine.
type Service struct {
	enginev1.UnimplementedEngineShimServiceServer

	cfg    Config
	srv    *servicekit.Server
	log    *slog.Logger
	epoch  uint64
	eng    Engine
	events *eventLog // the engine's KV event batches, numbered in this epoch
	// d and pool are the simulated engine's driver and shared pool client
	// (nil in front of a real engine, and pool without --pool-addr); only
	// eng is used to serve, the tests look inside.
	d    *driver
	pool *poolClient
	// prompts are the latest prompts kept whole (nil: none kept).
	prompts *prompts
	bases   *prometheus.CounterVec
	// running are the requests being generated, for the heartbeats.
	running *runningRequests
}

// New builds the shim around its engine — a fresh simulated engine, or the
// adapter to the real engine cfg.Engine names — and registers its gRPC
// service, REST gateway and metrics on srv.
func New(cfg Config, srv *servicekit.Server) (*Service, error) {
	if cfg.WorkerID == "" {
		return nil, errors.New("engine-shim: a worker id is required")
	}
	s := &Service{cfg: cfg, srv: srv, log: srv.Logger(), epoch: newEpoch(), prompts: newPrompts(cfg.BlockSize, cfg.PromptCacheTokens),
		running: newRunningRequests()}
	s.bases = prometheus.NewCounterVec(prometheus.CounterOpts{Name: srv.MetricName("prompt_bases_total"),
		Help: "Generate requests that named a prompt base, by outcome (held, not_held: the sender resent the whole prompt)."}, []string{"outcome"})
	if err := srv.Registry().Register(s.bases); err != nil {
		return nil, fmt.Errorf("engine-shim: %w", err)
	}
	s.events = newEventLog(cfg.WorkerID, s.epoch, cfg.ReplayBatches, time.Now)
	switch cfg.Engine {
	case "", "sim":
		d, err := newSimEngine(cfg, srv, s.events)
		if err != nil {
			return nil, fmt.Errorf("engine-shim: %w", err)
		}
		s.eng, s.d, s.pool = d, d, d.pool
	default:
		r, err := newRealEngine(cfg, srv, s.events, s.log)
		if err != nil {
			return nil, fmt.Errorf("engine-shim: %w", err)
		}
		s.eng = r
	}
	enginev1.RegisterEngineShimServiceServer(srv, s)
	srv.Gateway(enginev1.RegisterEngineShimServiceHandler)
	return s, nil
}

// newEpoch is random per process start, so subscribers can tell a restarted
// shim (whose sequences begin again at 1) from the one they followed.
func newEpoch() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// Epoch is this process's epoch.
func (s *Service) Epoch() uint64 { return s.epoch }

// Run runs the engine and keeps the scheduler registration until ctx is
// done. When ctx ends the shim deregisters; the simulated engine then drains
// the requests in flight (Engine.Run) before Run returns.
func (s *Service) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.register(ctx) }()
	err := s.eng.Run(ctx)
	return errors.Join(err, <-errc)
}

func (s *Service) Generate(req *enginev1.GenerateRequest, stream enginev1.EngineShimService_GenerateServer) error {
	defer s.running.start(req.GetRequestId(), time.Now())()
	var w whole
	if req.GetBase() != nil {
		var err error
		if w, err = s.prompts.expand(req); err != nil {
			s.bases.WithLabelValues("not_held").Inc()
			return errorStatus(err)
		}
		s.bases.WithLabelValues("held").Inc()
	}
	if key := s.prompts.keep(req, w); key != 0 {
		stream = keptStream{stream, key}
	}
	return s.eng.Generate(stream.Context(), req, stream)
}

// keptStream tells the sender, in the result, under which key the shim
// kept the request's prompt.
type keptStream struct {
	enginev1.EngineShimService_GenerateServer
	key uint64
}

func (k keptStream) Send(m *enginev1.GenerateResponse) error {
	if r := m.GetResult(); r != nil {
		r.PromptKept = k.key
	}
	return k.EngineShimService_GenerateServer.Send(m)
}

func (s *Service) SubscribeKvEvents(req *enginev1.SubscribeKvEventsRequest, stream enginev1.EngineShimService_SubscribeKvEventsServer) error {
	ctx := stream.Context()
	next := req.GetFromSequence()
	switch live := s.events.nextSequence(); {
	case next == 0:
		next = live
	case next > live:
		// A cursor ahead of this stream comes from an earlier epoch (the
		// shim restarted and numbering began again): waiting for it would
		// silently skip everything until then.
		return errorStatus(fmt.Errorf("from_sequence %d is ahead of this epoch's stream (next is %d): %w", next, live, errAhead))
	}
	for {
		batches, changed, err := s.events.batchesFrom(next)
		if err != nil {
			return errorStatus(err)
		}
		for _, b := range batches {
			if err := stream.Send(&enginev1.SubscribeKvEventsResponse{Batch: b}); err != nil {
				return err
			}
			next = b.GetSequence() + 1
		}
		if len(batches) > 0 {
			continue // maybe more buffered than one read returns
		}
		select {
		case <-ctx.Done():
			return errorStatus(ctx.Err())
		case <-s.srv.Done():
			return errorStatus(errStopped)
		case <-changed:
		}
	}
}

func (s *Service) GetKvSnapshot(context.Context, *enginev1.GetKvSnapshotRequest) (*enginev1.GetKvSnapshotResponse, error) {
	evs, seq := s.eng.Snapshot()
	return &enginev1.GetKvSnapshotResponse{
		WorkerId: s.cfg.WorkerID,
		Epoch:    s.epoch,
		Sequence: seq,
		Events:   kvwire.EventsToProto(evs),
	}, nil
}

func (s *Service) ApplyKvHints(_ context.Context, req *enginev1.ApplyKvHintsRequest) (*enginev1.ApplyKvHintsResponse, error) {
	env := req.GetEnvelope()
	return &enginev1.ApplyKvHintsResponse{MessageId: env.GetMessageId(), Outcomes: s.eng.ApplyHints(env.GetActions())}, nil
}

func (s *Service) GetLoad(context.Context, *enginev1.GetLoadRequest) (*enginev1.GetLoadResponse, error) {
	return &enginev1.GetLoadResponse{WorkerId: s.cfg.WorkerID, Load: s.eng.Load(), Capacity: s.eng.Capacity()}, nil
}

// advertiseAddr is what other services dial: the flag, else the listen
// address with a wildcard host made concrete.
func (s *Service) advertiseAddr() string {
	if s.cfg.AdvertiseAddr != "" {
		return s.cfg.AdvertiseAddr
	}
	addr := s.srv.GRPCAddr()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// workerProto is the shim's registration: what its engine is, holds and
// takes of the KV hints.
func (s *Service) workerProto() *workerv1.Worker {
	info := s.eng.Info()
	return &workerv1.Worker{
		WorkerId:    s.cfg.WorkerID,
		Address:     s.advertiseAddr(),
		Engine:      info.Name,
		Model:       s.cfg.Model,
		BlockSize:   uint32(info.BlockSize),
		DpSize:      uint32(info.DPSize),
		Capacity:    s.eng.Capacity(),
		Epoch:       s.epoch,
		Load:        s.eng.Load(),
		HintSupport: kvwire.HintSupportProto(s.eng.HintSupport()),
	}
}
