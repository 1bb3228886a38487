package mesh

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit"
)

// waitReady polls until the scheduler lists every worker and the flash indexer
// follows every worker's event stream: from then on a turn can be routed by
// what the workers hold.
func waitReady(ctx context.Context, dial []grpc.DialOption, schedAddr, flashAddr string, workers int) error {
	sconn, err := servicekit.Dial(schedAddr, dial...)
	if err != nil {
		return err
	}
	defer sconn.Close()
	fconn, err := servicekit.Dial(flashAddr, dial...)
	if err != nil {
		return err
	}
	defer fconn.Close()
	sched := schedulerv1.NewSchedulerServiceClient(sconn)
	flash := flashindexv1.NewFlashIndexerServiceClient(fconn)

	var registered, indexed int
	for {
		if ws, err := sched.ListWorkers(ctx, &schedulerv1.ListWorkersRequest{}); err == nil {
			registered = len(ws.GetWorkers())
		}
		if st, err := flash.GetStats(ctx, &flashindexv1.GetStatsRequest{}); err == nil {
			indexed = int(st.GetFollowedWorkers())
		}
		if registered >= workers && indexed >= workers {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d workers registered, %d indexed: %w", registered, workers, indexed, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
