//go:build unix

package servicekit

import (
	"context"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// BenchmarkCallConn: the same small unary call, as a unary gRPC call and over
// a call stream, from 8 goroutines at once, through a servicekit server (its
// stats handler and interceptors included). cpu-ns/op is the process's CPU
// per call, client and server together.
//
//	go test ./services/servicekit -run '^$' -bench CallConn -benchtime 20000x -count 6
func BenchmarkCallConn(b *testing.B) {
	for _, via := range []string{"unary", "stream"} {
		b.Run(via, func(b *testing.B) {
			r := start(b, Options{})
			var cc grpc.ClientConnInterface = r.conn
			if via == "stream" {
				cc = NewCallConn(r.conn)
			}
			if _, err := invoke(context.Background(), cc, echoMethod, "warm"); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(4) // 8 callers on 2 cores
			before := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					if _, err := invoke(ctx, cc, echoMethod, "x"); err != nil {
						b.Error(err)
					}
					cancel()
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-before)/float64(b.N), "cpu-ns/op")
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
