package servicekit

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// scripted is a stream that yields its messages, then err.
type scripted struct {
	grpc.ServerStreamingClient[int]
	msgs []int
	err  error
}

func (s *scripted) Recv() (*int, error) {
	if len(s.msgs) == 0 {
		return nil, s.err
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return &m, nil
}

func TestWatchReopensAndStops(t *testing.T) {
	refused := errors.New("refused")
	opens := []func() (grpc.ServerStreamingClient[int], error){
		func() (grpc.ServerStreamingClient[int], error) { return nil, refused },
		func() (grpc.ServerStreamingClient[int], error) { return &scripted{msgs: []int{1, 2}, err: io.EOF}, nil },
		func() (grpc.ServerStreamingClient[int], error) {
			return &scripted{msgs: []int{3, 4, 5}, err: io.EOF}, nil
		},
	}
	var got []int
	var endings []error
	n := 0
	bo := Backoff{Min: time.Millisecond, Max: time.Millisecond}
	Watch(context.Background(), bo, func(context.Context) (grpc.ServerStreamingClient[int], error) {
		n++
		return opens[n-1]()
	}, func(m *int) bool {
		got = append(got, *m)
		return *m < 4 // stop for good at 4
	}, func(err error) { endings = append(endings, err) })
	if len(got) != 4 || got[3] != 4 || n != 3 {
		t.Fatalf("got %v after %d opens", got, n)
	}
	if len(endings) != 2 || endings[0] != refused || endings[1] != io.EOF {
		t.Fatalf("endings %v", endings)
	}
}

func TestWatchEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	bo := Backoff{Min: time.Millisecond, Max: time.Millisecond}
	opens := 0
	Watch(ctx, bo, func(context.Context) (grpc.ServerStreamingClient[int], error) {
		if opens++; opens == 3 {
			cancel()
		}
		return nil, errors.New("down")
	}, func(*int) bool { return true }, func(error) {})
	if opens != 3 {
		t.Fatalf("opened %d times", opens)
	}
}
