package servicekit

import (
	"context"
	"net"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Address lists split as every list flag does.
func TestAddressLists(t *testing.T) {
	for in, want := range map[string][]string{
		"":                      nil,
		"a:1":                   {"a:1"},
		" a:1 , b:2,,c:3 ":      {"a:1", "b:2", "c:3"},
		",":                     nil,
		"scheduler-0:9100,x:80": {"scheduler-0:9100", "x:80"},
	} {
		if got := SplitList(in); !reflect.DeepEqual(got, want) {
			t.Errorf("SplitList(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := DialAny(" , "); err == nil {
		t.Error("DialAny of no address: want an error")
	}
}

// healthServer serves grpc.health.v1 on a loopback port until stopped.
func healthServer(t *testing.T) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(lis)
	return lis.Addr().String(), g.Stop
}

// A connection over a list keeps working while any replica lives.
func TestDialAnyMovesToALiveReplica(t *testing.T) {
	a, stopA := healthServer(t)
	b, stopB := healthServer(t)
	defer stopB()
	conn, err := DialAny(a + "," + b)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return CheckHealth(ctx, conn)
	}
	if err := check(); err != nil {
		t.Fatalf("both up: %v", err)
	}
	stopA()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := check()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first replica gone, the second never answered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
