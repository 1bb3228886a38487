package servicekit

import (
	"context"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// HandleIDWithSlashes registers on mux a GET route for one unary method
// whose request is named in the path by a variable of any number of
// segments: pattern holds "{field=**}" (e.g. "/v1/programs/{session_id=**}",
// "/v1/sessions/{session_id=**}/lineage"), and newReq makes the request
// from that field's value, '/' and all. Session ids come from the clients'
// headers and may hold '/' ("team/a/agent-1"); a mapping's
// "/v1/programs/{session_id}" is one path segment, and the gateway splits
// the path on every '/' once it is unescaped, "%2F" included, so such an id
// matched no route at all. A query cannot replace field; the call goes over
// call, that is the gateway's loopback connection, through the same
// interceptors as the mapping's routes.
//
// Register it before the generated mapping: the gateway tries the latest
// registration first, so the mapping's routes keep what "**" would take
// wrongly (the bare collection, as an empty id) and every id without '/'.
func HandleIDWithSlashes[Req, Resp proto.Message](mux *runtime.ServeMux, pattern, field, fullMethod string,
	newReq func(id string) Req, call func(context.Context, Req, ...grpc.CallOption) (Resp, error)) error {
	fromPath := utilities.NewDoubleArray([][]string{{field}})
	return mux.HandlePath(http.MethodGet, pattern, func(w http.ResponseWriter, r *http.Request, path map[string]string) {
		_, out := runtime.MarshalerForRequest(mux, r)
		ctx, err := runtime.AnnotateContext(r.Context(), mux, r, fullMethod, runtime.WithHTTPPathPattern(pattern))
		if err != nil {
			runtime.HTTPError(r.Context(), mux, out, w, r, err)
			return
		}
		req := newReq(path[field])
		if err := r.ParseForm(); err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		if err := runtime.PopulateQueryParameters(req, r.Form, fromPath); err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, status.Error(codes.InvalidArgument, err.Error()))
			return
		}
		var md runtime.ServerMetadata
		resp, err := call(ctx, req, grpc.Header(&md.HeaderMD), grpc.Trailer(&md.TrailerMD))
		ctx = runtime.NewServerMetadataContext(ctx, md)
		if err != nil {
			runtime.HTTPError(ctx, mux, out, w, r, err)
			return
		}
		runtime.ForwardResponseMessage(ctx, mux, out, w, r, resp, mux.GetForwardResponseOptions()...)
	})
}
