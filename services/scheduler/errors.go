package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/routing"
)

// errInvalid marks a request the caller must fix.
var errInvalid = errors.New("invalid request")

// errShutdown: the scheduler is stopping; the caller should retry elsewhere.
var errShutdown = errors.New("scheduler shutting down")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, args...)...)
}

// codeTable maps domain errors to gRPC codes: the one place where the
// service boundary decides what a client sees.
var codeTable = []struct {
	err  error
	code codes.Code
}{
	{errInvalid, codes.InvalidArgument},
	{registry.ErrInvalidWorker, codes.InvalidArgument},
	{registry.ErrUnknownWorker, codes.NotFound},
	{admission.ErrUnknownProgram, codes.NotFound},
	{routing.ErrNoWorkers, codes.Unavailable},
	{errShutdown, codes.Unavailable},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// shedStatus is the answer to a new session admission control turned
// away: ResourceExhausted with a RetryInfo, which the frontend answers as
// 429 with Retry-After.
func shedStatus(retryAfter time.Duration) error {
	st := status.New(codes.ResourceExhausted, "fleet over capacity: new session shed, retry later")
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)}); err == nil {
		st = d
	}
	return st.Err()
}

// toStatus turns any error into a gRPC status error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return status.Error(e.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}
