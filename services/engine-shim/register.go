package engineshim

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit"
)

// register keeps this worker registered with the scheduler: RegisterWorker,
// then Heartbeat with load at a third of the lease; NOT_FOUND (the scheduler
// restarted or let the lease lapse) means register again. On the way out it
// deregisters so routing stops at once instead of at lease expiry.
func (s *Service) register(ctx context.Context) error {
	if s.cfg.SchedulerAddr == "" {
		return nil
	}
	conn, err := servicekit.Dial(s.cfg.SchedulerAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := schedulerv1.NewSchedulerServiceClient(conn)
	log := s.log.With("scheduler", s.cfg.SchedulerAddr, "worker_id", s.cfg.WorkerID)

	registered := false
	wait := time.Duration(0)
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
				if err != nil {
					log.Warn("deregister failed", "err", err)
				}
			}
			return nil
		case <-timer.C:
		}
		if !registered {
			if s.cfg.AdvertiseAddr == "" && s.srv.GRPCAddr() == "" {
				wait = 20 * time.Millisecond // not listening yet: the address is unknown
				continue
			}
			resp, err := client.RegisterWorker(ctx, &schedulerv1.RegisterWorkerRequest{Worker: s.workerProto()})
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("register failed", "err", err)
				}
				wait = s.cfg.RegisterRetry
				continue
			}
			registered = true
			wait = heartbeatInterval(resp.GetLeaseTtl().AsDuration())
			log.Info("registered", "address", s.advertiseAddr(), "epoch", s.epoch, "lease_ttl", resp.GetLeaseTtl().AsDuration())
			continue
		}
		resp, err := client.Heartbeat(ctx, &schedulerv1.HeartbeatRequest{WorkerId: s.cfg.WorkerID, Load: s.load()})
		switch {
		case status.Code(err) == codes.NotFound:
			log.Info("scheduler forgot this worker; registering again")
			registered, wait = false, 0
		case err != nil:
			if ctx.Err() == nil {
				log.Warn("heartbeat failed", "err", err)
			}
			wait = s.cfg.RegisterRetry
		default:
			wait = heartbeatInterval(resp.GetLeaseTtl().AsDuration())
		}
	}
}

// heartbeatInterval renews at a third of the lease, as the scheduler's API
// suggests, within sane bounds.
func heartbeatInterval(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return time.Second
	}
	return min(max(ttl/3, 50*time.Millisecond), 30*time.Second)
}
