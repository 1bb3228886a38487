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
	"switchyard.dev/pkg/basecache"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/pkg/turns"
	"switchyard.dev/services/servicekit"
)

// errInvalid marks a request the caller must fix.
var errInvalid = errors.New("invalid request")

// errShutdown: the scheduler is stopping; the caller should retry elsewhere.
var errShutdown = errors.New("scheduler shutting down")

// errLagged: a watcher fell too far behind its events; it should watch again.
var errLagged = errors.New("watcher fell too far behind; watch again")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, args...)...)
}

// errorCodes maps domain errors to gRPC codes: the one place where the
// service boundary decides what a client sees.
var errorCodes = servicekit.ErrorCodes{
	{Err: errInvalid, Code: codes.InvalidArgument},
	{Err: registry.ErrInvalidWorker, Code: codes.InvalidArgument},
	{Err: registry.ErrUnknownWorker, Code: codes.NotFound},
	{Err: admission.ErrUnknownProgram, Code: codes.NotFound},
	{Err: basecache.ErrBaseNotHeld, Code: codes.NotFound},
	{Err: routing.ErrNoWorkers, Code: codes.Unavailable},
	{Err: turns.ErrEveryWorkerExcluded, Code: codes.FailedPrecondition},
	{Err: errShutdown, Code: codes.Unavailable},
	{Err: errLagged, Code: codes.ResourceExhausted},
	{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded},
	{Err: context.Canceled, Code: codes.Canceled},
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

// toStatus turns any error into a gRPC status error (errorCodes).
func toStatus(err error) error { return errorCodes.Status(err) }
