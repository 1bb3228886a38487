package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

//go:embed static
var static embed.FS

// assets is static/ as the root of the console's files.
var assets = func() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // static/ is embedded at build time
	}
	return sub
}()

// Handler serves the console's page and assets: the page at /console and
// /console/, its files below /console/. Mount it at both paths; the
// frontend's data endpoints (/console/state, /console/events) are more
// specific patterns and take precedence.
func Handler() http.Handler {
	files := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(assets))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok && r.URL.Path != strings.TrimSuffix(Prefix, "/") {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		// The page talks only to its own origin; everything it draws is
		// built with the DOM (inline style attributes are not needed).
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "+
			"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// A new binary brings a new page: never serve a stale one.
		h.Set("Cache-Control", "no-cache")
		if name == "" {
			// The page at /console too, not a redirect to /console/: its
			// assets are named by absolute paths.
			http.ServeFileFS(w, r, assets, "index.html")
			return
		}
		files.ServeHTTP(w, r)
	})
}
