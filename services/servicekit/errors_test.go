package servicekit

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorCodesStatus(t *testing.T) {
	errGone := errors.New("gone")
	table := ErrorCodes{
		{errGone, codes.NotFound},
		{context.Canceled, codes.Canceled},
	}
	peer := status.Error(codes.Unavailable, "peer down")
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{fmt.Errorf("worker %q: %w", "w1", errGone), codes.NotFound, `worker "w1": gone`},
		{context.Canceled, codes.Canceled, "context canceled"},
		{errors.New("surprise"), codes.Internal, "surprise"},
		{peer, codes.Unavailable, "peer down"},
	} {
		st := status.Convert(table.Status(tc.err))
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("Status(%v) = %v %q, want %v %q", tc.err, st.Code(), st.Message(), tc.code, tc.msg)
		}
	}
	if table.Status(nil) != nil {
		t.Error("Status(nil) is not nil")
	}
}
