package mesh

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"

	flashindexv1 "switchyard.dev/gen/switchyard/flashindex/v1"
	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/services/servicekit"
)

// waitReady polls until every scheduler lists every worker, every flash
// indexer follows every worker's event stream, and every scheduler asks
// every indexer (asked: the fewest indexers any scheduler asks): from then
// on a turn can be routed by what the workers hold, whichever replicas it
// meets. (A scheduler that starts asking an indexer after a session's first
// turn has told the others only, predict-on-route, could send its second
// turn elsewhere while the first turn's KV events are on their way.)
func waitReady(ctx context.Context, dial []grpc.DialOption, schedAddrs, flashAddrs []string, workers int, asked func() int) error {
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
		n := asked()
		if registered >= workers && indexed >= workers && n >= len(flashAddrs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d workers registered with every scheduler, %d indexed by every flash indexer, %d of %d indexers asked by every scheduler: %w",
				registered, workers, indexed, n, len(flashAddrs), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// indexersAsked is the fewest flash indexers any of scheds asks FindMatches
// of: the indexers its flash_indexer_ready gauge holds at 1.
func indexersAsked(scheds []*servicekit.Server) int {
	fewest := -1
	for _, srv := range scheds {
		n := 0
		mfs, _ := srv.Registry().Gather()
		for _, mf := range mfs {
			if !strings.HasSuffix(mf.GetName(), "_flash_indexer_ready") {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetGauge().GetValue() == 1 {
					n++
				}
			}
		}
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return max(fewest, 0)
}
