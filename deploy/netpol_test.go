package deploy

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

// call is one kind of gRPC call a service makes to another.
type call struct {
	from, to string
	// flag is the caller's flag holding the callee's address; "" = the callee is a
	// worker, dialed at the address it registered with (the scheduler hands it out).
	flag string
	// optional calls are made only when the caller has the flag set (the shared pool).
	optional bool
	// health: the call is a grpc.health.v1 check, which the mesh's authorization lets
	// any identity make.
	health bool
}

// calls is who dials whom: servicekit.Dial of each *-addr flag in services/*, and the
// worker addresses. The NetworkPolicies must admit exactly these (and what the values
// open to clients, operators and Prometheus); TestCallsMatchAuthorization checks them
// against the services' own allow-list (services/servicekit/authz.go).
var calls = []call{
	{from: "frontend", to: "scheduler", flag: "scheduler-addr"},                          // Route, FinishRequest, MarkPrefillComplete; ListSessions, ListWorkers, ListPrograms (admin API, console)
	{from: "frontend", to: "engine-shim"},                                                // Generate
	{from: "frontend", to: "kvhint-emitter", flag: "kvhint-emitter-addr"},                // GetStats, ListRecentHints (the console)
	{from: "scheduler", to: "flash-indexer", flag: "flash-indexer-addr"},                 // FindMatches, PredictRoute
	{from: "scheduler", to: "engine-shim", health: true},                                 // worker health checks
	{from: "scheduler", to: "scheduler", flag: "peer-addrs"},                             // the replicas' admission use
	{from: "flash-indexer", to: "scheduler", flag: "scheduler-addr"},                     // WatchWorkers
	{from: "flash-indexer", to: "engine-shim"},                                           // SubscribeKvEvents, GetKvSnapshot
	{from: "flash-indexer", to: "kv-pool", flag: "pool-addr", optional: true},            // SubscribePoolEvents
	{from: "session-prefix-indexer", to: "scheduler", flag: "scheduler-addr"},            // WatchWorkers, WatchPrograms, WatchRouteDecisions
	{from: "session-prefix-indexer", to: "engine-shim"},                                  // SubscribeKvEvents, GetKvSnapshot
	{from: "kvhint-emitter", to: "scheduler", flag: "scheduler-addr"},                    // WatchWorkers, WatchPrograms
	{from: "kvhint-emitter", to: "session-prefix-indexer", flag: "session-indexer-addr"}, // GetSessionLineage
	{from: "kvhint-emitter", to: "engine-shim"},                                          // ApplyKvHints
	{from: "engine-shim", to: "scheduler", flag: "scheduler-addr"},                       // RegisterWorker, Heartbeat, DeregisterWorker
	{from: "engine-shim", to: "kv-pool", flag: "pool-addr", optional: true},              // PutPages, GetPrefix (simulated engines)
}

// edge: connections from a source (a workload's pods, a peer of the values, "anyone")
// to a workload's pods on a named port.
type edge struct{ from, to, port string }

func (e edge) String() string { return fmt.Sprintf("%s -> %s:%s", e.from, e.to, e.port) }

// checkNetworkPolicies: every pod is isolated by a policy of the release, and the
// policies admit exactly the calls above between the pods that make them, plus the
// frontend's clients, networkPolicy.adminFrom on gRPC ports and metricsFrom on HTTP
// ports. A pool's extraIngress is its own policy, exactly as the values give it.
func checkNetworkPolicies(t *testing.T, r *release) {
	if !r.valueBool("networkPolicy.enabled") {
		if len(r.netpols) > 0 {
			t.Errorf("networkPolicy.enabled is false but %d NetworkPolicies are rendered", len(r.netpols))
		}
		return
	}
	extra := map[string]any{} // policy name -> the pool's extraIngress
	for _, p := range r.pools() {
		if x, ok := p["extraIngress"].([]any); ok && len(x) > 0 {
			extra[fmt.Sprintf("%s-%s-extra", r.fullname(), p["name"])] = x
		}
	}
	admitted := map[edge]bool{}
	isolated := map[*pod]bool{}
	for _, np := range r.netpols {
		id := "NetworkPolicy/" + np.Name
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("%s: policy types %v, want [Ingress]", id, np.Spec.PolicyTypes)
		}
		selected := r.selectPods(selectorOf(t, id, &np.Spec.PodSelector))
		if len(selected) == 0 {
			t.Errorf("%s: selects no pod", id)
		}
		if want, ok := extra[np.Name]; ok {
			delete(extra, np.Name)
			if got, want := normalize(t, np.Spec.Ingress), normalize(t, want); got != want {
				t.Errorf("%s: ingress %s, the values' extraIngress %s", id, got, want)
			}
			for _, p := range selected {
				if p.component != "engine-shim" || p.pool != strings.TrimSuffix(strings.TrimPrefix(np.Name, r.fullname()+"-"), "-extra") {
					t.Errorf("%s: selects %s, not only its pool's pods", id, p)
				}
			}
			continue
		}
		for _, p := range selected {
			isolated[p] = true
		}
		for _, rule := range np.Spec.Ingress {
			var sources []string
			if len(rule.From) == 0 {
				sources = []string{"anyone"}
			}
			for _, peer := range rule.From {
				if peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.IPBlock == nil {
					for _, src := range r.selectPods(selectorOf(t, id+" peer", peer.PodSelector)) {
						sources = append(sources, src.workload)
					}
				} else {
					sources = append(sources, "peer "+normalize(t, peer))
				}
			}
			ports := rule.Ports
			if len(ports) == 0 {
				ports = []networkingv1.NetworkPolicyPort{{}}
			}
			for _, target := range selected {
				for _, port := range ports {
					name := "*"
					if port.Port != nil {
						cp, _, ok := podPort(target, *port.Port)
						if !ok {
							t.Errorf("%s: port %s is no port of %s", id, port.Port.String(), target)
							continue
						}
						name = cp.Name
					}
					for _, s := range sources {
						admitted[edge{s, target.workload, name}] = true
					}
				}
			}
		}
	}
	for name := range extra {
		t.Errorf("no NetworkPolicy %s for a pool's extraIngress", name)
	}
	for _, p := range r.pods {
		if !isolated[p] {
			t.Errorf("%s: no NetworkPolicy selects it, so anyone may connect", p)
		}
	}
	want := r.expectedEdges(t)
	var missing, unexpected []string
	for e := range want {
		if !admitted[e] {
			missing = append(missing, e.String())
		}
	}
	for e := range admitted {
		if !want[e] {
			unexpected = append(unexpected, e.String())
		}
	}
	sort.Strings(missing)
	sort.Strings(unexpected)
	for _, e := range missing {
		t.Errorf("NetworkPolicies refuse a call the mesh makes: %s", e)
	}
	for _, e := range unexpected {
		t.Errorf("NetworkPolicies admit a connection nothing makes: %s", e)
	}
}

// expectedEdges: the calls between the rendered pods, and the values' peers.
func (r *release) expectedEdges(t *testing.T) map[edge]bool {
	want := map[edge]bool{}
	for _, c := range calls {
		for _, from := range r.podsOf(c.from) {
			if c.flag != "" && c.optional && !podSets(r, from, c.flag) {
				continue
			}
			for _, to := range r.podsOf(c.to) {
				want[edge{from.workload, to.workload, "grpc"}] = true
			}
		}
	}
	peers := func(key string) []string {
		list, _ := r.value(key).([]any)
		var out []string
		for _, p := range list {
			out = append(out, "peer "+normalize(t, p))
		}
		return out
	}
	for _, p := range r.pods {
		for _, s := range peers("networkPolicy.adminFrom") {
			want[edge{s, p.workload, "grpc"}] = true
		}
		for _, s := range peers("networkPolicy.metricsFrom") {
			want[edge{s, p.workload, "http"}] = true
		}
	}
	clients := peers("networkPolicy.frontendFrom")
	if len(clients) == 0 {
		clients = []string{"anyone"}
	}
	for _, p := range r.podsOf("frontend") {
		for _, s := range clients {
			want[edge{s, p.workload, "http"}] = true
		}
	}
	return want
}

// podSets reports whether the pod's Switchyard container sets a flag.
func podSets(r *release, p *pod, flag string) bool {
	for _, c := range p.containers() {
		if _, ok := switchyardService(r, c); ok {
			if _, set := envVar(c, envName(flag)); set {
				return true
			}
		}
	}
	return false
}

// normalize is v as the API types write it (so {} and omitted fields compare equal).
func normalize(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	switch v.(type) {
	case networkingv1.NetworkPolicyPeer, map[string]any:
		var peer networkingv1.NetworkPolicyPeer
		if err := json.Unmarshal(b, &peer); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		out = peer
	default:
		var rules []networkingv1.NetworkPolicyIngressRule
		if err := json.Unmarshal(b, &rules); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		out = rules
	}
	b, _ = json.Marshal(out)
	return string(b)
}

func (r *release) fullname() string {
	if f := r.str("fullnameOverride"); f != "" {
		return f
	}
	return releaseName // the release name contains the chart's
}

// TestCallsMatchAuthorization: calls is the mesh's allow-list (the acl table of
// services/servicekit/authz.go, which every service enforces with mutual TLS on), read
// as caller -> service edges: the same edges, but for health checks, which the list
// grants to any mesh identity. If the services start calling someone new, this fails
// until calls (and the chart's switchyard.callers) say so too.
func TestCallsMatchAuthorization(t *testing.T) {
	const file = "../services/servicekit/authz.go"
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatalf("reading the mesh's allow-list: %v", err)
	}
	consts := map[string]string{"AdminIdentity": "admin"} // AdminIdentity is tls.go's
	aliases := map[string]string{}
	var acl *ast.CompositeLit
	ast.Inspect(f, func(n ast.Node) bool {
		switch d := n.(type) {
		case *ast.ValueSpec:
			for i, name := range d.Names {
				if i < len(d.Values) {
					if lit, ok := d.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						consts[name.Name], _ = strconv.Unquote(lit.Value)
					}
					if id, ok := d.Values[i].(*ast.Ident); ok {
						aliases[name.Name] = id.Name
					}
				}
				if name.Name == "acl" && i < len(d.Values) {
					acl, _ = d.Values[i].(*ast.CompositeLit)
				}
			}
		}
		return true
	})
	for name, target := range aliases {
		consts[name] = consts[target]
	}
	if acl == nil {
		t.Fatalf("%s: no `var acl = map[string]rule{...}`; update this test to where the allow-list went", file)
	}
	owner := map[string]string{
		"schedulerv1": "scheduler", "enginev1": "engine-shim", "flashindexv1": "flash-indexer",
		"sessionindexv1": "session-prefix-indexer", "kvhintv1": "kvhint-emitter", "kvpoolv1": "kv-pool",
		"frontendv1": "frontend",
	}
	got := map[[2]string]bool{}
	for _, el := range acl.Elts {
		kv := el.(*ast.KeyValueExpr)
		sel, ok := kv.Key.(*ast.SelectorExpr)
		if !ok {
			continue // a literal method name (reflection): operators only
		}
		callee := owner[fmt.Sprint(sel.X)]
		if callee == "" {
			continue // grpc.health.v1: any mesh identity
		}
		ce, ok := kv.Value.(*ast.CallExpr)
		if !ok {
			t.Fatalf("%s: the rule of %s.%s is not a call", file, sel.X, sel.Sel)
		}
		switch fmt.Sprint(ce.Fun) {
		case "ownWorker":
			got[[2]string{"engine-shim", callee}] = true
		case "callers":
			for _, a := range ce.Args {
				caller := consts[fmt.Sprint(a)]
				if caller == "" {
					t.Fatalf("%s: unknown caller %s", file, a)
				}
				// Operators, API clients through the frontend's gateway, anyone: not
				// services of the mesh.
				if caller != "admin" && caller != "tenant" && caller != "*" {
					got[[2]string{caller, callee}] = true
				}
			}
		default:
			t.Fatalf("%s: a rule made by %s, which this test does not know", file, ce.Fun)
		}
	}
	want := map[[2]string]bool{}
	for _, c := range calls {
		if !c.health {
			want[[2]string{c.from, c.to}] = true
		}
	}
	for e := range got {
		if !want[e] {
			t.Errorf("the mesh lets %s call %s, but calls (and so the NetworkPolicies) do not", e[0], e[1])
		}
	}
	for e := range want {
		if !got[e] {
			t.Errorf("calls has %s -> %s, which the mesh's allow-list refuses", e[0], e[1])
		}
	}
}
