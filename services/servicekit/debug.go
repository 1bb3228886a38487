package servicekit

import (
	"net/http"
	"net/http/pprof"
)

// The profiles of a running service (net/http/pprof's handlers) on its HTTP
// port, at /debug/pprof/, when Options.Pprof is on (--pprof; off by default:
// a profile shows a service's code paths and a CPU profile costs while it
// runs). Who may read them:
//   - with mutual TLS, on an internal port: an admin certificate only;
//   - on the public port (the frontend's): what the service's GuardDebug
//     allows (the frontend: an operator's API key, or nothing where its
//     admin API is open);
//   - otherwise (no mesh authentication configured at all): anyone who
//     reaches the port, as every other call of such a mesh.

// GuardDebug sets who may read /debug/pprof/ on a public HTTP port (see
// above); a service with a public port and no guard serves its profiles to
// nobody there.
func (s *Server) GuardDebug(allowed func(*http.Request) bool) { s.debugGuard.Store(&allowed) }

// debugAllowed applies the rules above.
func (s *Server) debugAllowed(r *http.Request) bool {
	if s.opts.PublicHTTP {
		g := s.debugGuard.Load()
		return g != nil && (*g)(r)
	}
	if s.authz == nil {
		return true
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	id, err := identityOf(r.TLS.PeerCertificates[0], s.authz.trustDomain)
	return err == nil && id.Service == AdminIdentity
}

// servePprof registers the profile handlers behind debugAllowed.
func (s *Server) servePprof() {
	guard := func(h http.HandlerFunc) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.debugAllowed(r) {
				s.log.WarnContext(r.Context(), "profile refused", "http.path", r.URL.Path, "remote", r.RemoteAddr)
				http.Error(w, "the profiles need an operator's credentials (an admin certificate, or the frontend's operator API key)", http.StatusForbidden)
				return
			}
			h(w, r)
		})
	}
	s.httpMux.Handle("GET /debug/pprof/", guard(pprof.Index))
	// No cmdline: a command line may carry secrets (--api-keys), which the
	// operator who reads profiles need not see.
	s.httpMux.Handle("GET /debug/pprof/cmdline", http.NotFoundHandler())
	s.httpMux.Handle("GET /debug/pprof/profile", guard(pprof.Profile))
	s.httpMux.Handle("GET /debug/pprof/symbol", guard(pprof.Symbol))
	s.httpMux.Handle("GET /debug/pprof/trace", guard(pprof.Trace))
}
