package mesh

import "github.com/prometheus/client_golang/prometheus"

// Registries is the metrics registry of every service the mesh runs (what
// each one's /metrics serves), by endpoint: the tests read the metrics the
// services export from them, described ones included (a label vector
// without observations shows in Describe, not in /metrics).
func (m *Mesh) Registries() map[Endpoint]*prometheus.Registry {
	out := make(map[Endpoint]*prometheus.Registry, len(m.procs))
	for _, p := range m.procs {
		out[p.ep] = p.srv.Registry()
	}
	return out
}

// CertHosts is certHosts, for the tests.
var CertHosts = certHosts
