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

// HandleWholePath registers on mux a GET route for one unary method whose
// request is named by the rest of the path: pattern ends in "{field=**}"
// (e.g. "/v1/programs/{session_id=**}"), and newReq makes the request from
// that field's value, '/' and all. Session ids come from the clients'
// headers and may hold '/' ("team/a/agent-1"); a mapping's
// "/v1/programs/{session_id}" is one path segment, and the gateway splits
// the path on every '/' once it is unescaped, "%2F" included, so such an id
// matched no route at all. A query cannot replace field; the call goes over
// call, that is the gateway's loopback connection, through the same
// interceptors as the mapping's routes.
//
// Register it before the generated mapping: the gateway tries the latest
// registration first, so the mapping's routes keep the bare collection
// (which "**" would take as an empty id) and every id without '/'.
func HandleWholePath[Req, Resp proto.Message](mux *runtime.ServeMux, pattern, field, fullMethod string,
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
