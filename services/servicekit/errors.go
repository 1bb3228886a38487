package servicekit

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorCodes is a service's one table from the errors of its core to the gRPC codes
// its clients see, kept at the service boundary (etcd's v3rpc/util.go): handlers
// return table.Status(err) and never pick a code themselves. The first entry err
// matches (errors.Is) wins; what no entry matches is Internal.
type ErrorCodes []ErrorCode

// ErrorCode maps the errors that are Err to Code.
type ErrorCode struct {
	Err  error
	Code codes.Code
}

// Status turns err into a gRPC status error with err's message: nil is nil, and an
// error that already carries a status (a peer's answer passed on) keeps it.
func (t ErrorCodes) Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(t.Code(err), err.Error())
}

// Code is the code of err's first matching entry, Internal if none matches.
func (t ErrorCodes) Code(err error) codes.Code {
	for _, e := range t {
		if errors.Is(err, e.Err) {
			return e.Code
		}
	}
	return codes.Internal
}
