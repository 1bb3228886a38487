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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/services/engine-shim/adapter"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

func (s *Service) engineName() string {
	if s.real != nil {
		return s.cfg.Engine
	}
	return "sim"
}

func (s *Service) dpSize() int {
	if s.real != nil {
		return max(1, s.real.Config().DPSize)
	}
	return 1
}

// Service is one engine shim.
type Service struct {
	enginev1.UnimplementedEngineShimServiceServer

	cfg   Config
	ecfg  enginesim.Config
	srv   *servicekit.Server
	log   *slog.Logger
	d     *driver
	epoch uint64
	real  *adapter.Backend // --engine vllm|sglang; nil for the simulated engine
	pool  *poolClient      // --pool-addr; nil without a shared pool
}

// New builds the shim around a fresh simulated engine and registers its gRPC
// service, REST gateway and metrics on srv.
func New(cfg Config, srv *servicekit.Server) (*Service, error) {
	if cfg.WorkerID == "" {
		return nil, errors.New("engine-shim: a worker id is required")
	}
	if cfg.Engine != "" && cfg.Engine != "sim" {
		s := &Service{cfg: cfg, srv: srv, log: srv.Logger(), epoch: newEpoch()}
		s.ecfg.BlockSize = cfg.BlockSize
		s.d = newDriver(nil, cfg.WorkerID, s.epoch, cfg.ReplayBatches, time.Now)
		if err := s.newRealBackend(); err != nil {
			return nil, fmt.Errorf("engine-shim: %w", err)
		}
		enginev1.RegisterEngineShimServiceServer(srv.GRPC(), s)
		srv.Gateway(enginev1.RegisterEngineShimServiceHandler)
		return s, nil
	}
	ecfg, err := cfg.engineConfig(defaultVocab())
	if err != nil {
		return nil, fmt.Errorf("engine-shim: %w", err)
	}
	var pool *poolClient
	if cfg.PoolAddr != "" {
		if pool, err = newPoolClient(srv, cfg.PoolAddr, cfg.PoolTimeout); err != nil {
			return nil, fmt.Errorf("engine-shim: %w", err)
		}
		ecfg.SharedPool = pool
	}
	eng, err := enginesim.New(ecfg)
	if err != nil {
		if pool != nil {
			pool.conn.Close()
		}
		return nil, fmt.Errorf("engine-shim: %w", err)
	}
	s := &Service{
		cfg:   cfg,
		ecfg:  eng.Config(),
		srv:   srv,
		log:   srv.Logger(),
		epoch: newEpoch(),
		pool:  pool,
	}
	s.d = newDriver(eng, cfg.WorkerID, s.epoch, cfg.ReplayBatches, time.Now)
	enginev1.RegisterEngineShimServiceServer(srv.GRPC(), s)
	srv.Gateway(enginev1.RegisterEngineShimServiceHandler)
	if err := registerMetrics(srv, s); err != nil {
		return nil, err
	}
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

// Run steps the engine and keeps the scheduler registration until ctx is
// done.
//
// Shutdown drains: when ctx ends, the shim deregisters and refuses new
// requests, but keeps stepping the engine until the requests in flight have
// finished (at most DrainTimeout), so the server's graceful stop sees them
// complete instead of failing them.
func (s *Service) Run(ctx context.Context) error {
	if s.real != nil {
		return s.runReal(ctx)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.register(ctx) }()
	engineCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	if s.pool != nil {
		// Writes keep flowing while the engine drains; stop with it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.pool.run(engineCtx)
		}()
		defer func() { stop(); <-done }()
	}
	go func() {
		<-ctx.Done()
		timer := time.NewTimer(s.cfg.DrainTimeout)
		defer timer.Stop()
		select {
		case <-s.d.drain():
		case <-timer.C:
			s.log.Warn("drain timed out; failing the requests still in flight")
		}
		stop()
	}()
	err := s.d.run(engineCtx)
	return errors.Join(err, <-errc)
}

// errorStatus is the one mapping from engine errors to gRPC codes.
func errorStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case status.Code(err) != codes.Unknown:
		return err
	case errors.Is(err, enginesim.ErrDuplicateID):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, enginesim.ErrInvalidRequest), errors.Is(err, enginesim.ErrPromptTooLong):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, enginesim.ErrBusy):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, errTooOld):
		return status.Error(codes.OutOfRange, "from_sequence is older than the replay buffer: load GetKvSnapshot and subscribe from its sequence + 1")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func (s *Service) Generate(req *enginev1.GenerateRequest, stream enginev1.EngineShimService_GenerateServer) error {
	if s.real != nil {
		return s.real.ServeGenerate(stream.Context(), req, stream)
	}
	if req.GetRequestId() == "" || len(req.GetTokenIds()) == 0 {
		return status.Error(codes.InvalidArgument, "request_id and token_ids are required")
	}
	sp := req.GetSampling()
	r := enginesim.Request{
		ID:           req.GetRequestId(),
		SessionID:    req.GetAgent().GetSessionId(),
		Prompt:       req.GetTokenIds(),
		HashSeed:     kvhash.Seed(req.GetLoraName(), req.GetCacheSalt()),
		MaxTokens:    int(sp.GetMaxTokens()),
		IgnoreEOS:    sp.GetIgnoreEos(),
		StopTokenIDs: sp.GetStopTokenIds(),
		ToolCall:     req.GetToolCallTokenIds(),
		Seed:         sp.GetSeed(),
		Priority:     req.GetPriority(),
	}
	// The frontend's hashes are reused when they were made with this
	// engine's block size (one per full block); otherwise the engine hashes.
	if bh := req.GetBlockHashes(); len(bh) > 0 && len(bh) == len(r.Prompt)/s.ecfg.BlockSize {
		r.BlockHashes = kvwire.Hashes(bh)
	}
	st, err := s.d.add(r)
	if err != nil {
		return errorStatus(err)
	}
	finished := false
	defer func() {
		if !finished {
			s.d.abort(r.ID) // client gone or stream broken: free the blocks now
		}
	}()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return errorStatus(ctx.Err())
		case <-st.notify:
		}
		tokens, result, err := st.take()
		if len(tokens) > 0 {
			if err := stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Delta{Delta: &enginev1.TokenDelta{TokenIds: tokens}}}); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
		if result != nil {
			finished = true
			return stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Result{Result: result}})
		}
	}
}

func (s *Service) SubscribeKvEvents(req *enginev1.SubscribeKvEventsRequest, stream enginev1.EngineShimService_SubscribeKvEventsServer) error {
	ctx := stream.Context()
	next := req.GetFromSequence()
	switch live := s.d.nextSequence(); {
	case next == 0:
		next = live
	case next > live:
		// A cursor ahead of this stream comes from an earlier epoch (the
		// shim restarted and numbering began again): waiting for it would
		// silently skip everything until then.
		return status.Errorf(codes.OutOfRange, "from_sequence %d is ahead of this epoch's stream (next is %d): the shim restarted; load GetKvSnapshot and subscribe from its sequence + 1", next, live)
	}
	for {
		batches, changed, err := s.d.batchesFrom(next)
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
			return status.Error(codes.Unavailable, "engine shim is shutting down")
		case <-changed:
		}
	}
}

func (s *Service) GetKvSnapshot(context.Context, *enginev1.GetKvSnapshotRequest) (*enginev1.GetKvSnapshotResponse, error) {
	if s.real != nil {
		return s.realSnapshot(), nil
	}
	evs, seq := s.d.snapshot()
	return &enginev1.GetKvSnapshotResponse{
		WorkerId: s.cfg.WorkerID,
		Epoch:    s.epoch,
		Sequence: seq,
		Events:   kvwire.EventsToProto(evs),
	}, nil
}

func (s *Service) ApplyKvHints(_ context.Context, req *enginev1.ApplyKvHintsRequest) (*enginev1.ApplyKvHintsResponse, error) {
	if s.real != nil {
		return s.real.ServeApplyKvHints(req), nil
	}
	env := req.GetEnvelope()
	actions := env.GetActions()
	out := make([]*kvv1.KvHintOutcome, len(actions))
	var hints []enginesim.Hint
	var idx []int // action index of each hint
	for i, a := range actions {
		h, reason, ok := hintFromProto(a)
		if !ok {
			out[i] = &kvv1.KvHintOutcome{ActionId: a.GetActionId(), Result: kvv1.HintResult_HINT_RESULT_REJECTED, Reason: reason}
			continue
		}
		hints = append(hints, h)
		idx = append(idx, i)
	}
	for j, o := range s.d.applyHints(hints) {
		i := idx[j]
		out[i] = &kvv1.KvHintOutcome{
			ActionId:       actions[i].GetActionId(),
			Result:         hintStatusToProto[o.Status],
			Reason:         o.Reason,
			BlocksAffected: uint32(o.Blocks),
		}
	}
	return &enginev1.ApplyKvHintsResponse{MessageId: env.GetMessageId(), Outcomes: out}, nil
}

func (s *Service) GetLoad(context.Context, *enginev1.GetLoadRequest) (*enginev1.GetLoadResponse, error) {
	return &enginev1.GetLoadResponse{WorkerId: s.cfg.WorkerID, Load: s.load(), Capacity: s.capacity()}, nil
}

func (s *Service) load() *workerv1.WorkerLoad {
	if s.real != nil {
		return s.real.Load()
	}
	st := s.d.stats()
	dev := st.Tiers[kv.TierDevice]
	var hit float64
	if st.PrefixQueryTokens > 0 {
		hit = float64(st.PrefixHitTokens) / float64(st.PrefixQueryTokens)
	}
	return &workerv1.WorkerLoad{
		RunningRequests: uint32(st.Running),
		WaitingRequests: uint32(st.Waiting),
		ActiveKvBlocks:  uint32(dev.Used),
		UsedKvBlocks:    uint32(dev.Occupied),
		TotalKvBlocks:   uint32(dev.Total),
		PrefixHitRate:   hit,
		Preemptions:     uint64(st.Preemptions),
		ObservedAt:      timestamppb.Now(),
	}
}

func (s *Service) capacity() *workerv1.WorkerCapacity {
	if s.real != nil {
		return s.real.Capacity()
	}
	c := s.ecfg
	return &workerv1.WorkerCapacity{
		GpuBlocks:          uint32(c.NumGPUBlocks),
		HostBlocks:         uint32(c.HostBlocks),
		DiskBlocks:         uint32(c.DiskBlocks),
		KvCapacityTokens:   uint64(c.NumGPUBlocks+c.HostBlocks+c.DiskBlocks) * uint64(c.BlockSize),
		MaxRunningRequests: uint32(c.MaxNumSeqs),
	}
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

func (s *Service) workerProto() *workerv1.Worker {
	return &workerv1.Worker{
		WorkerId:  s.cfg.WorkerID,
		Address:   s.advertiseAddr(),
		Engine:    s.engineName(),
		Model:     s.cfg.Model,
		BlockSize: uint32(s.ecfg.BlockSize),
		DpSize:    uint32(s.dpSize()),
		Capacity:  s.capacity(),
		Epoch:     s.epoch,
		Load:      s.load(),
	}
}
