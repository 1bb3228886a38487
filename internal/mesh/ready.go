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

// waitReady polls until every scheduler lists every worker and every flash
// indexer follows every worker's event stream: from then on a turn can be
// routed by what the workers hold, whichever replicas it meets.
func waitReady(ctx context.Context, dial []grpc.DialOption, schedAddrs, flashAddrs []string, workers int) error {
	var scheds []schedulerv1.SchedulerServiceClient
	var flashes []flashindexv1.FlashIndexerServiceClient
	for _, a := range schedAddrs {
		conn, err := servicekit.Dial(a, dial...)
		if err != nil {
			return err
		}
		defer conn.Close()
		scheds = append(scheds, schedulerv1.NewSchedulerServiceClient(conn))
	}
	for _, a := range flashAddrs {
		conn, err := servicekit.Dial(a, dial...)
		if err != nil {
			return err
		}
		defer conn.Close()
		flashes = append(flashes, flashindexv1.NewFlashIndexerServiceClient(conn))
	}
	for {
		// The fewest any replica has.
		registered, indexed := workers, workers
		for _, c := range scheds {
			n := 0
			if ws, err := c.ListWorkers(ctx, &schedulerv1.ListWorkersRequest{}); err == nil {
				n = len(ws.GetWorkers())
			}
			registered = min(registered, n)
		}
		for _, c := range flashes {
			n := 0
			if st, err := c.GetStats(ctx, &flashindexv1.GetStatsRequest{}); err == nil {
				n = int(st.GetFollowedWorkers())
			}
			indexed = min(indexed, n)
		}
		if registered >= workers && indexed >= workers {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d workers registered with every scheduler, %d indexed by every flash indexer: %w", registered, workers, indexed, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
