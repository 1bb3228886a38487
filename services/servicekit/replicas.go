package servicekit

import (
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Replicated peers. A service run as several replicas (schedulers, flash
// indexers) is named by a comma-separated list of their addresses in the
// flag that used to take one: "scheduler-0:9100,scheduler-1:9100". Callers
// that need one particular replica (a session's owner, every replica's
// stream) dial each address; callers that need any one of them (the worker
// set every scheduler holds alike) dial the list as one connection. The
// list is split by SplitList, as every list flag is.

// DialAny is Server.DialAny with servicekit.Dial's transport.
func DialAny(list string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return dialAny(Dial, list, opts...)
}

// DialAny returns one connection to whichever replica of list answers:
// calls go to the first address that connects and move to the next when it
// fails (gRPC's pick_first over every address). For a single address it is
// Dial.
func (s *Server) DialAny(list string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return dialAny(s.Dial, list, opts...)
}

func dialAny(dial func(string, ...grpc.DialOption) (*grpc.ClientConn, error), list string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	addrs := SplitList(list)
	switch len(addrs) {
	case 0:
		return nil, fmt.Errorf("servicekit: no address in %q", list)
	case 1:
		return dial(addrs[0], opts...)
	}
	// A resolver of its own per connection: it only hands over the list.
	r := manual.NewBuilderWithScheme("switchyard-replicas")
	eps := make([]resolver.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}}
	}
	r.InitialState(resolver.State{Endpoints: eps})
	return dial(r.Scheme()+":///"+strings.Join(addrs, ","), append([]grpc.DialOption{grpc.WithResolvers(r)}, opts...)...)
}
