package engineshim

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/services/servicekit"
)

// register keeps this worker registered with the scheduler: RegisterWorker,
// then Heartbeat with load at a third of the lease; NOT_FOUND (the scheduler
// restarted or let the lease lapse) means register again. A failed call is
// tried again from 100 ms, doubling (with jitter) up to RegisterRetry, so a scheduler that
// comes back has this worker again within a fraction of a second instead of
// after the next full retry period. On the way out it deregisters so routing
// stops at once instead of at lease expiry.
//
// With several scheduler replicas it registers with every one, each on its
// own: every replica routes to the same worker set, and one replica's
// outage does not touch the others' leases.
func (s *Service) register(ctx context.Context) error {
	addrs := servicekit.SplitList(s.cfg.SchedulerAddr)
	conns := make([]*grpc.ClientConn, len(addrs))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i, a := range addrs {
		var err error
		if conns[i], err = s.srv.Dial(a); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.registerWith(ctx, addrs[i], c)
		}()
	}
	wg.Wait()
	return nil
}

// registerWith keeps this worker registered with one scheduler (on conn)
// until ctx ends.
func (s *Service) registerWith(ctx context.Context, addr string, conn *grpc.ClientConn) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	log := s.log.With("scheduler", addr, "worker_id", s.cfg.WorkerID)

	// A scheduler that restarts has forgotten this worker, and would only
	// say so at the next heartbeat, up to a third of the lease later: the
	// connection coming back is the cue to heartbeat (or register) at once.
	back := make(chan struct{}, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchReconnects(wctx, conn, back)
	}()
	defer func() {
		stopWatch()
		<-watched
	}()

	registered := false
	var announced *workerv1.WorkerCapacity // the capacity last registered
	wait := time.Duration(0)
	retry := servicekit.Backoff{Min: min(100*time.Millisecond, s.cfg.RegisterRetry), Max: s.cfg.RegisterRetry}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			if registered {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_, err := client.DeregisterWorker(dctx, &schedulerv1.DeregisterWorkerRequest{WorkerId: s.cfg.WorkerID})
				cancel()
				// NOT_FOUND: the scheduler let this worker go already (its
				// health check saw it stop first), which is what was asked.
				if err != nil && status.Code(err) != codes.NotFound {
					log.Warn("deregister failed", "err", err)
				}
			}
			return
		case <-timer.C:
		case <-back:
			timer.Stop()
		}
		if conn.GetState() == connectivity.TransientFailure {
			// A retry reconnects now, not when the connection's own backoff
			// (up to a second) would: a restarted scheduler has this worker
			// within the retry's wait of listening.
			conn.ResetConnectBackoff()
		}
		if !registered {
			if s.cfg.AdvertiseAddr == "" && s.srv.GRPCAddr() == "" {
				wait = 20 * time.Millisecond // not listening yet: the address is unknown
				continue
			}
			w := s.workerProto()
			resp, err := client.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: w})
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("register failed", "err", err)
				}
				wait = retry.Next()
				continue
			}
			registered, announced = true, w.GetCapacity()
			retry.Reset()
			wait = heartbeatInterval(resp.GetLeaseTtl().AsDuration())
			log.Info("registered", "address", s.advertiseAddr(), "epoch", s.epoch, "lease_ttl", resp.GetLeaseTtl().AsDuration())
			continue
		}
		// The scheduler sizes the worker (admission's KV budget, its most
		// running requests) by the capacity it registered with; heartbeats
		// carry only load. A real engine's capacity is read from its
		// /metrics, which answer only once it has loaded its weights,
		// minutes after the shim registered with none: a changed capacity
		// is announced by registering again (the scheduler replaces the
		// worker's record).
		if c := s.eng.Capacity(); !proto.Equal(c, announced) {
			log.Info("engine capacity changed; registering again", "gpu_blocks", c.GetGpuBlocks(), "kv_capacity_tokens", c.GetKvCapacityTokens())
			registered, wait = false, 0
			continue
		}
		load, now := s.eng.Load(), time.Now()
		resp, err := client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: s.cfg.WorkerID, Load: load,
			LongRunningRequestIds: s.running.longer(now, registry.LongRunning), LoadAge: loadAge(load, now)})
		switch {
		case status.Code(err) == codes.NotFound:
			log.Info("scheduler forgot this worker; registering again")
			registered, wait = false, 0
		case err != nil:
			if ctx.Err() == nil {
				log.Warn("heartbeat failed", "err", err)
			}
			wait = retry.Next()
		default:
			retry.Reset()
			wait = heartbeatInterval(resp.GetLeaseTtl().AsDuration())
		}
	}
}

// loadAge is how old load's sample is at now (none without its time, 0 for
// one ahead of now).
func loadAge(load *workerv1.WorkerLoad, now time.Time) *durationpb.Duration {
	if load.GetObservedAt() == nil {
		return nil
	}
	return durationpb.New(max(now.Sub(load.GetObservedAt().AsTime()), 0))
}

// heartbeatInterval renews at a third of the lease, as the scheduler's API
// suggests, within sane bounds: at most registry.MaxHeartbeat, which the
// scheduler's sweep of lost turns counts on.
func heartbeatInterval(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return time.Second
	}
	return min(max(ttl/3, 50*time.Millisecond), registry.MaxHeartbeat)
}

// watchReconnects signals back each time conn becomes ready again after it
// was not (the scheduler restarted, or the network came back), until ctx
// ends. It keeps an idle connection connecting, so a lost one is redialled
// at once (with servicekit's backoff) instead of at the next call.
func watchReconnects(ctx context.Context, conn *grpc.ClientConn, back chan<- struct{}) {
	wasReady := false
	for {
		st := conn.GetState()
		if st == connectivity.Idle {
			conn.Connect()
		}
		if st == connectivity.Ready && !wasReady {
			select {
			case back <- struct{}{}:
			default:
			}
		}
		wasReady = st == connectivity.Ready
		if !conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}
