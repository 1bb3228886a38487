package adapter

import (
	"context"
	"time"

	enginev1 "switchyard.dev/gen/switchyard/engine/v1"
)

// GenerateStream is the server side of EngineShimService.Generate.
type GenerateStream interface {
	Send(*enginev1.GenerateResponse) error
}

// ServeGenerate runs one Generate call on the engine — token deltas, then
// the result, on the call's stream — so the shim's handler is one line:
// return b.ServeGenerate(stream.Context(), req, stream). Errors are gRPC
// status errors.
func (b *Backend) ServeGenerate(ctx context.Context, req *enginev1.GenerateRequest, stream GenerateStream) error {
	res, err := b.Generate(ctx, req, func(toks []uint32) error {
		return stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Delta{Delta: &enginev1.TokenDelta{TokenIds: toks}}})
	})
	if err != nil {
		return err
	}
	return stream.Send(&enginev1.GenerateResponse{Kind: &enginev1.GenerateResponse_Result{Result: res}})
}

// ServeApplyKvHints answers EngineShimService.ApplyKvHints.
func (b *Backend) ServeApplyKvHints(req *enginev1.ApplyKvHintsRequest) *enginev1.ApplyKvHintsResponse {
	env := req.GetEnvelope()
	return &enginev1.ApplyKvHintsResponse{MessageId: env.GetMessageId(), Outcomes: b.ApplyHints(env.GetActions(), time.Now())}
}
