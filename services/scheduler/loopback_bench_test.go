package scheduler

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
)

// BenchmarkRouteLoopback offers Route (then FinishRequest) over real gRPC on
// loopback TCP at a fixed 2,000 routes/s, open loop (a slow answer does not
// slow the offered rate), with 64 workers and 100,000 live session_aware
// programs; b.N is the number of routes. It reports the Route latency
// percentiles as the client sees them.
func BenchmarkRouteLoopback(b *testing.B) {
	const rate = 2000
	st := serviceStates[fmt.Sprint("session_aware", 64, 100_000)]
	if st == nil {
		st = newServiceState(b, "session_aware", 64, 100_000)
		serviceStates[fmt.Sprint("session_aware", 64, 100_000)] = st
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	schedulerv1.RegisterSchedulerServiceServer(g, st.s)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	defer func() {
		g.Stop()
		<-served
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := schedulerv1.NewSchedulerServiceClient(conn)
	ctx := context.Background()
	// Warm the connection.
	if _, err := client.ListWorkers(ctx, &schedulerv1.ListWorkersRequest{}); err != nil {
		b.Fatal(err)
	}

	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := st.reqs[i%len(st.reqs)]
			start := time.Now()
			_, err := client.Route(ctx, req)
			lat[i] = time.Since(start)
			if err == nil {
				_, err = client.FinishRequest(ctx, st.fins[i%len(st.fins)])
			}
			if err != nil {
				errMu.Lock()
				firstErr = err
				errMu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
