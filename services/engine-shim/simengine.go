package engineshim

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
	kvv1 "switchyard.dev/gen/switchyard/kv/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/agentctx"
	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/pkg/hints"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
	"switchyard.dev/pkg/tokenizer"
	"switchyard.dev/services/engine-shim/adapter"
	"switchyard.dev/services/servicekit"
	"switchyard.dev/services/servicekit/kvwire"
)

// newSimEngine builds the simulated engine (with its shared pool client
// when cfg.PoolAddr is set) and the driver that steps it, and registers its
// metrics on srv.
func newSimEngine(cfg Config, srv *servicekit.Server, log *eventLog) (*driver, error) {
	ecfg, err := cfg.engineConfig(defaultVocab())
	if err != nil {
		return nil, err
	}
	var pool *poolClient
	if cfg.PoolAddr != "" {
		if pool, err = newPoolClient(srv, cfg.PoolAddr, cfg.PoolTimeout); err != nil {
			return nil, err
		}
		ecfg.SharedPool = pool
	}
	eng, err := enginesim.New(ecfg)
	if err != nil {
		if pool != nil {
			pool.conn.Close()
		}
		return nil, err
	}
	d := newDriver(eng, log, time.Now)
	d.pool, d.drainTimeout, d.logger = pool, cfg.DrainTimeout, srv.Logger()
	if err := registerMetrics(srv, cfg, d); err != nil {
		if pool != nil {
			pool.conn.Close()
		}
		return nil, err
	}
	return d, nil
}

func (d *driver) Info() engineInfo {
	return engineInfo{Name: "sim", BlockSize: d.ecfg.BlockSize, DPSize: 1}
}

// Run steps the engine until ctx is done, then drains: it refuses new
// requests but keeps stepping until the requests in flight have finished
// (at most drainTimeout), so the server's graceful stop sees them complete
// instead of failing them.
func (d *driver) Run(ctx context.Context) error {
	engineCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	if d.pool != nil {
		// Writes keep flowing while the engine drains; stop with it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			d.pool.run(engineCtx)
		}()
		defer func() { stop(); <-done }()
	}
	go func() {
		<-ctx.Done()
		timer := time.NewTimer(d.drainTimeout)
		defer timer.Stop()
		select {
		case <-d.drain():
		case <-timer.C:
			d.logger.Warn("drain timed out; failing the requests still in flight")
		}
		stop()
	}()
	return d.run(engineCtx)
}

func (d *driver) Generate(ctx context.Context, req *enginev1.GenerateRequest, stream adapter.GenerateStream) error {
	if req.GetRequestId() == "" || len(req.GetTokenIds()) == 0 {
		return errorStatus(errNoRequest)
	}
	sp := req.GetSampling()
	r := enginesim.Request{
		ID:           req.GetRequestId(),
		SessionID:    agentctx.Scope(req.GetAgent().GetTenant(), req.GetAgent().GetSessionId()),
		Prompt:       req.GetTokenIds(),
		HashSeed:     kvhash.Seed(req.GetLoraName(), req.GetCacheSalt()),
		MaxTokens:    int(sp.GetMaxTokens()),
		IgnoreEOS:    sp.GetIgnoreEos(),
		StopTokenIDs: sp.GetStopTokenIds(),
		ToolCall:     req.GetToolCallTokenIds(),
		Seed:         sp.GetSeed(),
		Priority:     req.GetPriority(),
		Retain:       time.Duration(req.GetRetentionSeconds()) * time.Second,
	}
	// The frontend's hashes are reused when they were made with this
	// engine's block size (one per full block); otherwise the engine hashes.
	if bh := req.GetBlockHashes(); len(bh) > 0 && len(bh) == len(r.Prompt)/d.ecfg.BlockSize {
		r.BlockHashes = kvwire.Hashes(bh)
	}
	st, err := d.add(r, newStopWatch(tokenizer.Default(), sp.GetStop(), sp.GetStopTokenIds()))
	if err != nil {
		return errorStatus(err)
	}
	finished := false
	defer func() {
		if !finished {
			d.abort(r.ID) // client gone or stream broken: free the blocks now
		}
	}()
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
			return errorStatus(err)
		}
		if result != nil {
			finished = true
			return stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Result{Result: result}})
		}
	}
}

// ApplyHints runs the actions the simulated engine implements, in order, as
// one batch of cache changes, and rejects the others with a reason.
func (d *driver) ApplyHints(actions []*kvv1.KvHintAction) []*kvv1.KvHintOutcome {
	out := make([]*kvv1.KvHintOutcome, len(actions))
	var hs []enginesim.Hint
	var idx []int // action index of each hint
	for i, a := range actions {
		h, reason, ok := hintFromProto(a)
		if !ok {
			out[i] = &kvv1.KvHintOutcome{ActionId: a.GetActionId(), Result: kvv1.HintResult_HINT_RESULT_REJECTED, Reason: reason}
			continue
		}
		hs = append(hs, h)
		idx = append(idx, i)
	}
	for j, o := range d.applyHints(hs) {
		i := idx[j]
		out[i] = &kvv1.KvHintOutcome{
			ActionId:       actions[i].GetActionId(),
			Result:         resultToProto[o.Status],
			Reason:         o.Reason,
			BlocksAffected: uint32(o.Blocks),
		}
	}
	return out
}

// HintSupport is the simulated engine's (enginesim.Engine.HintSupport: no
// demote or prefetch without a host or disk tier).
func (d *driver) HintSupport() hints.Support {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.HintSupport()
}

func (d *driver) Load() *workerv1.WorkerLoad {
	st := d.stats()
	dev := st.Tiers[kv.TierDevice]
	var hit float64
	if st.PrefixQueryTokens > 0 {
		hit = float64(st.PrefixHitTokens) / float64(st.PrefixQueryTokens)
	}
	return &workerv1.WorkerLoad{
		RunningRequests:   uint32(st.Running),
		WaitingRequests:   uint32(st.Waiting),
		ActiveKvBlocks:    uint32(dev.Used),
		UsedKvBlocks:      uint32(dev.Occupied),
		TotalKvBlocks:     uint32(dev.Total),
		PrefixHitRate:     hit,
		Preemptions:       uint64(st.Preemptions),
		ObservedAt:        timestamppb.Now(),
		HostUsedBlocks:    proto.Uint32(uint32(st.Tiers[kv.TierHost].Occupied)),
		DiskUsedBlocks:    proto.Uint32(uint32(st.Tiers[kv.TierDisk].Occupied)),
		EvictedBlocks:     proto.Uint64(uint64(st.Evictions[kv.TierDevice])),
		RePrefilledTokens: proto.Uint64(uint64(st.RePrefilledTokens)),
	}
}

func (d *driver) Capacity() *workerv1.WorkerCapacity {
	c := d.ecfg
	return &workerv1.WorkerCapacity{
		GpuBlocks:          uint32(c.NumGPUBlocks),
		HostBlocks:         uint32(c.HostBlocks),
		DiskBlocks:         uint32(c.DiskBlocks),
		KvCapacityTokens:   uint64(c.NumGPUBlocks+c.HostBlocks+c.DiskBlocks) * uint64(c.BlockSize),
		MaxRunningRequests: uint32(c.MaxNumSeqs),
	}
}
