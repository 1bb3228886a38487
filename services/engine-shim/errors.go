package engineshim

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"

	"switchyard.dev/pkg/enginesim"
	"switchyard.dev/services/servicekit"
)

// The shim's own errors; the engine's are enginesim's.
var (
	// errStopped answers calls that arrive after the driver has stopped, and ends
	// the streams open when it stops.
	errStopped = errors.New("engine shim is shutting down")
	// errNoRequest: a Generate without its id or prompt.
	errNoRequest = errors.New("request_id and token_ids are required")
	// errTooOld: a subscription from a sequence the replay buffer no longer holds.
	errTooOld = errors.New("from_sequence is older than the replay buffer: load GetKvSnapshot and subscribe from its sequence + 1")
	// errAhead: a subscription from a sequence this epoch has not reached, a
	// cursor of an earlier epoch.
	errAhead = errors.New("the shim restarted; load GetKvSnapshot and subscribe from its sequence + 1")
)

// errorCodes is the one mapping from engine and shim errors to gRPC codes, at
// the boundary (the real-engine adapter maps engine HTTP statuses in
// adapter.httpStatus).
var errorCodes = servicekit.ErrorCodes{
	{Err: enginesim.ErrDuplicateID, Code: codes.AlreadyExists},
	{Err: enginesim.ErrInvalidRequest, Code: codes.InvalidArgument},
	{Err: enginesim.ErrPromptTooLong, Code: codes.InvalidArgument},
	{Err: errNoRequest, Code: codes.InvalidArgument},
	{Err: errBaseNotHeld, Code: codes.NotFound},
	{Err: enginesim.ErrBusy, Code: codes.FailedPrecondition},
	{Err: errTooOld, Code: codes.OutOfRange},
	{Err: errAhead, Code: codes.OutOfRange},
	{Err: errStopped, Code: codes.Unavailable},
	{Err: context.Canceled, Code: codes.Canceled},
	{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded},
}

// errorStatus turns any error of the request path into a gRPC status error.
func errorStatus(err error) error { return errorCodes.Status(err) }
