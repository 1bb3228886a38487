package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"switchyard.dev/internal/mesh"
	engineshim "switchyard.dev/services/engine-shim"
	"switchyard.dev/services/engine-shim/protofake"
)

// The dashboard and the alert rules under deploy/, relative to this package.
const (
	dashboardFile = "../../deploy/dashboards/switchyard.json"
	alertsFile    = "../../deploy/prometheus/alerts.yaml"
)

// TestDashboardsQueryExportedMetrics checks that every metric the Grafana
// dashboard and the Prometheus alert rules query is one a Switchyard service
// exports, with the labels they match on and group by: it runs the mesh
// (`switchyard up`) with every kind of service and engine shim in it (a
// simulated engine on a shared KV pool, and a vLLM protocol fake), serves one
// turn, and reads each service's registry. Descriptors name the label
// vectors that have seen nothing yet; the gathered families tell the
// histograms, whose _bucket, _sum and _count series are what queries read.
func TestDashboardsQueryExportedMetrics(t *testing.T) {
	queries := append(dashboardQueries(t), alertQueries(t)...)
	if len(queries) < 20 {
		t.Fatalf("only %d queries found in %s and %s: are the files being read right?", len(queries), dashboardFile, alertsFile)
	}

	exported := meshMetrics(t)
	problems, used := checkQueries(queries, exported)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d queries use %d metrics: %s", len(queries), len(used), strings.Join(used, " "))
}

// TestCheckQueriesCatchesUnexported makes sure the check above can fail: a
// metric no service exports, a label a metric lacks, the _bucket of a
// counter, and a query the tokenizer finds no metric in are each reported.
func TestCheckQueriesCatchesUnexported(t *testing.T) {
	exported := map[string]metricInfo{
		"switchyard_frontend_tokens_total":             {labels: set("kind")},
		"switchyard_frontend_ttft_seconds_bucket":      {labels: set("api", "le")},
		"switchyard_frontend_requests_total":           {labels: set("api", "status")},
		"switchyard_scheduler_lease_expirations_total": {},
	}
	for _, tc := range []struct{ expr, want string }{
		{`sum(rate(switchyard_frontend_bogus_total[5m]))`, "switchyard_frontend_bogus_total"},
		{`rate(switchyard_frontend_tokens_total{knd="cached"}[5m])`, `label "knd"`},
		{`sum by (worker) (rate(switchyard_frontend_tokens_total[5m]))`, `label "worker"`},
		{`rate(switchyard_frontend_requests_total_bucket[5m])`, "switchyard_frontend_requests_total_bucket"},
		{`sum(rate(switchyard_frontend_tokens_total[5m])) / on() group_left() vector(1) * 0 + nonexistent`, "nonexistent"},
		{`vector(1)`, "no metric"},
	} {
		problems, _ := checkQueries([]query{{where: "test", expr: tc.expr}}, exported)
		if len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: want a problem naming %s, got %q", tc.expr, tc.want, problems)
		}
	}
	ok := `histogram_quantile(0.99, sum by (le, api) (rate(switchyard_frontend_ttft_seconds_bucket{api=~"$api"}[$__rate_interval])))
		/ ignoring(status) (sum without (status) (increase(switchyard_frontend_requests_total[1h] offset 10m)) > bool 3)
		and increase(switchyard_scheduler_lease_expirations_total[10m:1m] @ end()) > 1e-3`
	if problems, used := checkQueries([]query{{where: "test", expr: ok}}, exported); len(problems) != 0 || len(used) != 3 {
		t.Errorf("valid query: problems %q, metrics %q", problems, used)
	}
}

// ---- the files ---------------------------------------------------------

// query is one PromQL expression and where it was found.
type query struct {
	where, expr string
	// labelOf, for a Grafana label_values() variable, is the label whose
	// values it lists (the metric must have it).
	labelOf string
}

// dashboardQueries are every panel target's expr and every query variable's
// query in the dashboard, nested panels (collapsed rows) included.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title         string            `json:"title"`
		UID           string            `json:"uid"`
		SchemaVersion int               `json:"schemaVersion"`
		Panels        []json.RawMessage `json:"panels"`
		Templating    struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("%s: title %q, uid %q, schemaVersion %d: want a title, a uid and schemaVersion >= 36", dashboardFile, d.Title, d.UID, d.SchemaVersion)
	}

	var qs []query
	hasDatasource := false
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			var q string
			hasDatasource = json.Unmarshal(v.Query, &q) == nil && q == "prometheus" && v.Name == "datasource"
		case "query":
			var q string
			if json.Unmarshal(v.Query, &q) != nil {
				var obj struct {
					Query string `json:"query"`
				}
				if err := json.Unmarshal(v.Query, &obj); err != nil {
					t.Errorf("%s: variable %s: query is neither a string nor an object: %v", dashboardFile, v.Name, err)
					continue
				}
				q = obj.Query
			}
			qs = append(qs, variableQuery("dashboard variable "+v.Name, q)...)
		}
	}
	if !hasDatasource {
		t.Errorf("%s: no Prometheus datasource variable named datasource", dashboardFile)
	}

	ids := map[int]string{}
	var walk func(panels []json.RawMessage)
	walk = func(panels []json.RawMessage) {
		for _, rp := range panels {
			var p struct {
				ID         int    `json:"id"`
				Type       string `json:"type"`
				Title      string `json:"title"`
				Datasource *struct {
					UID string `json:"uid"`
				} `json:"datasource"`
				Targets []struct {
					RefID string `json:"refId"`
					Expr  string `json:"expr"`
				} `json:"targets"`
				Panels []json.RawMessage `json:"panels"`
			}
			if err := json.Unmarshal(rp, &p); err != nil {
				t.Errorf("%s: panel: %v", dashboardFile, err)
				continue
			}
			if other, dup := ids[p.ID]; dup {
				t.Errorf("%s: panels %q and %q share id %d", dashboardFile, other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q does not query the ${datasource} variable", dashboardFile, p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no targets", dashboardFile, p.Title)
			}
			for _, tg := range p.Targets {
				qs = append(qs, query{where: fmt.Sprintf("dashboard panel %q target %s", p.Title, tg.RefID), expr: tg.Expr})
			}
		}
	}
	walk(d.Panels)
	return qs
}

// labelValues is Grafana's label_values([selector,] label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(?:(.*?)\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// variableQuery turns a Prometheus variable's query into PromQL to check.
func variableQuery(where, q string) []query {
	if m := labelValues.FindStringSubmatch(q); m != nil {
		if m[1] == "" {
			return nil // every metric's values of a label: nothing to check
		}
		return []query{{where: where, expr: m[1], labelOf: m[2]}}
	}
	if inner, ok := strings.CutPrefix(strings.TrimSpace(q), "query_result("); ok {
		return []query{{where: where, expr: strings.TrimSuffix(strings.TrimSpace(inner), ")")}}
	}
	return []query{{where: where, expr: q}}
}

// alertQueries are the expr of every rule in the alert rules, whose shape it
// checks on the way: alerts with a severity, a summary and a description.
func alertQueries(t *testing.T) []query {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert         string            `yaml:"alert"`
				Record        string            `yaml:"record"`
				Expr          string            `yaml:"expr"`
				For           string            `yaml:"for"`
				KeepFiringFor string            `yaml:"keep_firing_for"`
				Labels        map[string]string `yaml:"labels"`
				Annotations   map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	duration := regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)
	var qs []query
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("%s: group %q: want a name and rules", alertsFile, g.Name)
		}
		for i, r := range g.Rules {
			name := r.Alert + r.Record
			where := fmt.Sprintf("alerts group %s rule %d (%s)", g.Name, i, name)
			switch {
			case (r.Alert == "") == (r.Record == ""):
				t.Errorf("%s: want exactly one of alert and record", where)
			case r.Alert != "":
				if alerts[r.Alert] {
					t.Errorf("%s: alert %s defined twice", where, r.Alert)
				}
				alerts[r.Alert] = true
				if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
					t.Errorf("%s: severity %q, want critical, warning or info", where, s)
				}
				if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
					t.Errorf("%s: want summary and description annotations", where)
				}
				if r.For != "" && !duration.MatchString(r.For) {
					t.Errorf("%s: for %q is not a Prometheus duration", where, r.For)
				}
			}
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", where)
			}
			qs = append(qs, query{where: where, expr: r.Expr})
		}
	}
	if len(alerts) == 0 {
		t.Errorf("%s: no alerts", alertsFile)
	}
	return qs
}

// ---- what the services export ------------------------------------------

// metricInfo is one exported series name: its labels, the service's own
// (variable and constant) and a histogram's le.
type metricInfo struct {
	labels   map[string]bool
	services map[string]bool
}

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// meshMetrics runs a mesh with every service and both kinds of engine shim,
// serves a turn through it, and returns every series name its services
// export.
func meshMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	// Cleanups, not defers: the fake outlives the mesh, which stops in
	// startMesh's cleanup.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	fake, err := protofake.Start(ctx, protofake.Config{Engine: protofake.VLLM, BlockSize: 16, NumGPUBlocks: 4096})
	if err != nil {
		t.Fatalf("start protocol fake: %v", err)
	}
	t.Cleanup(fake.Close)
	m := startMesh(t, func(cfg *mesh.Config) {
		cfg.Workers = 2
		cfg.PoolPages = 256 // kv-pool, and the shim's and flash indexer's pool metrics
		cfg.Shim = func(i int, c *engineshim.Config) {
			if i == 1 { // the adapter's metrics
				c.Engine = protofake.VLLM
				c.Model = "fake-model"
				c.Adapter.URL = fake.URL()
				c.Adapter.EventsEndpoint = fake.EventsEndpoint()
				c.Adapter.ReplayEndpoint = fake.ReplayEndpoint()
			}
		}
	})

	// One turn, so that the label vectors it touches (the frontend's TTFT
	// histogram among them) are gathered with their type.
	resp, body := postChat(t, "http://"+m.Endpoint("frontend").HTTP, "dashboards", map[string]any{
		"model": "switchyard-sim", "max_tokens": 8,
		"messages": []message{{Role: "user", Content: "Say hello to the dashboards."}},
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("turn: status %d: %s", resp.StatusCode, body)
	}

	services := map[string]bool{}
	classic := map[string]bool{} // classic histograms
	out := map[string]metricInfo{}
	add := func(name, service string, labels []string) {
		mi, ok := out[name]
		if !ok {
			mi = metricInfo{labels: map[string]bool{}, services: map[string]bool{}}
			out[name] = mi
		}
		for _, l := range labels {
			mi.labels[l] = true
		}
		mi.services[service] = true
	}
	for ep, reg := range m.Registries() {
		services[ep.Service] = true
		described := describe(t, reg)
		for name, labels := range described {
			add(name, ep.Service, labels)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("%s: gather: %v", ep.Name, err)
		}
		for _, f := range families {
			labels := slices.Clone(described[f.GetName()])
			native := false
			for _, s := range f.GetMetric() {
				for _, lp := range s.GetLabel() {
					labels = append(labels, lp.GetName())
				}
				if h := s.GetHistogram(); h != nil && h.Schema != nil {
					native = true
				}
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				if !native { // a classic histogram has no series of its bare name
					classic[f.GetName()] = true
				}
				add(f.GetName()+"_bucket", ep.Service, append(slices.Clone(labels), "le"))
				add(f.GetName()+"_sum", ep.Service, labels)
				add(f.GetName()+"_count", ep.Service, labels)
			case dto.MetricType_SUMMARY:
				add(f.GetName(), ep.Service, append(slices.Clone(labels), "quantile"))
				add(f.GetName()+"_sum", ep.Service, labels)
				add(f.GetName()+"_count", ep.Service, labels)
			default:
				add(f.GetName(), ep.Service, labels)
			}
		}
	}
	for name := range classic {
		delete(out, name)
	}
	for _, s := range []string{"frontend", "scheduler", "flash-indexer", "session-prefix-indexer", "kvhint-emitter", "engine-shim", "kv-pool"} {
		if !services[s] {
			t.Errorf("the mesh ran no %s: its metrics are not checked", s)
		}
	}
	return out
}

// descName and descLabels read a Desc's name and labels from its String (a
// Desc exports neither otherwise).
var (
	descName   = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*")`)
	descLabel  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
	descVarsAt = ", variableLabels: {"
)

// describe is every metric name the registry's collectors describe, with
// their labels.
func describe(t *testing.T, reg *prometheus.Registry) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	out := map[string][]string{}
	for d := range ch {
		s := d.String()
		m := descName.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("cannot read a metric name from %s", s)
		}
		name, err := strconv.Unquote(m[1])
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		var labels []string
		if at := strings.LastIndex(s, descVarsAt); at >= 0 {
			consts := s[len(m[0]):at]
			for _, lm := range descLabel.FindAllStringSubmatch(consts, -1) {
				labels = append(labels, lm[1])
			}
			for _, v := range strings.Split(strings.TrimSuffix(s[at+len(descVarsAt):], "}}"), ",") {
				v = strings.TrimSuffix(strings.TrimPrefix(v, "c("), ")")
				if v != "" {
					labels = append(labels, v)
				}
			}
		}
		out[name] = append(out[name], labels...)
	}
	return out
}

// ---- the check ---------------------------------------------------------

// targetLabels are the labels Prometheus (and the Prometheus Operator's
// ServiceMonitors) add to every scraped series.
var targetLabels = set("job", "instance", "namespace", "pod", "service", "container", "endpoint", "__name__")

// checkQueries returns what is wrong with each query (a metric not exported,
// a label it matches on or groups by that its metrics lack, no metric at
// all), and the metrics the queries use, sorted.
func checkQueries(qs []query, exported map[string]metricInfo) (problems []string, used []string) {
	seen := map[string]bool{}
	for _, q := range qs {
		p, err := parsePromQL(q.expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v in %q", q.where, err, q.expr))
			continue
		}
		if len(p.selectors) == 0 {
			problems = append(problems, fmt.Sprintf("%s: no metric found in %q", q.where, q.expr))
			continue
		}
		known := maps.Clone(targetLabels)
		for _, s := range p.selectors {
			seen[s.name] = true
			mi, ok := exported[s.name]
			if !ok {
				hint := ""
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, cut := strings.CutSuffix(s.name, suffix); cut && exported[base].labels != nil {
						hint = fmt.Sprintf("; %s is described but saw nothing in the test's turn, so its type is unknown: make the test observe it", base)
					}
				}
				problems = append(problems, fmt.Sprintf("%s: metric %s is exported by no service (%q)%s", q.where, s.name, q.expr, hint))
				continue
			}
			for l := range mi.labels {
				known[l] = true
			}
			for _, l := range s.labels {
				if !mi.labels[l] && !targetLabels[l] {
					problems = append(problems, fmt.Sprintf("%s: metric %s has no label %q (it has %s)", q.where, s.name, l, sortedKeys(mi.labels)))
				}
			}
		}
		grouping := p.grouping
		if q.labelOf != "" {
			grouping = append(grouping, q.labelOf)
		}
		for _, l := range grouping {
			if !known[l] {
				problems = append(problems, fmt.Sprintf("%s: label %q is on none of the query's metrics (%q)", q.where, l, q.expr))
			}
		}
	}
	return problems, slices.Sorted(maps.Keys(seen))
}

func sortedKeys(m map[string]bool) string { return strings.Join(slices.Sorted(maps.Keys(m)), ", ") }

// ---- a PromQL tokenizer ------------------------------------------------

// selector is a metric a query reads, with the labels it matches on.
type selector struct {
	name   string
	labels []string
}

type promQL struct {
	selectors []selector
	grouping  []string // labels in by, without, on, ignoring, group_left, group_right
}

// PromQL's keywords and aggregation operators, which read like metric names
// (an aggregation may take its grouping before its parenthesis).
var (
	groupingKeywords = set("by", "without", "on", "ignoring", "group_left", "group_right")
	otherKeywords    = set("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
		"sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
		"count_values", "group", "limitk", "limit_ratio")
)

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

// parsePromQL finds the metrics a PromQL expression (with Grafana's $
// variables in it) reads, and the labels it matches and groups on. It is a
// tokenizer, not a parser: identifiers that are no keyword and are not
// called (followed by "(") are metrics; strings, durations, numbers and
// variables are skipped.
func parsePromQL(q string) (promQL, error) {
	var out promQL
	i, n := 0, len(q)
	skipSpace := func() {
		for i < n && (q[i] == ' ' || q[i] == '\t' || q[i] == '\n' || q[i] == '\r') {
			i++
		}
	}
	skipString := func() error {
		quote := q[i]
		for i++; i < n; i++ {
			switch {
			case q[i] == '\\' && quote != '`':
				i++
			case q[i] == quote:
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string")
	}
	ident := func() string {
		start := i
		for i < n && isIdent(q[i]) {
			i++
		}
		return q[start:i]
	}
	// labelList reads "(a, b, ...)" at i.
	labelList := func() ([]string, error) {
		i++ // (
		var ls []string
		for {
			skipSpace()
			switch {
			case i >= n:
				return nil, fmt.Errorf("unterminated label list")
			case q[i] == ')':
				i++
				return ls, nil
			case q[i] == ',':
				i++
			case isIdentStart(q[i]):
				ls = append(ls, ident())
			default:
				return nil, fmt.Errorf("unexpected %q in a label list", q[i])
			}
		}
	}
	// matchers reads "{l op "v", ...}" at i: the label names, and the
	// value of __name__ when it is matched exactly.
	matchers := func() (labels []string, name string, err error) {
		i++ // {
		for {
			skipSpace()
			switch {
			case i >= n:
				return nil, "", fmt.Errorf("unterminated label matchers")
			case q[i] == '}':
				i++
				return labels, name, nil
			case q[i] == ',':
				i++
			case isIdentStart(q[i]):
				l := ident()
				skipSpace()
				op := ""
				for i < n && strings.IndexByte("=!~", q[i]) >= 0 {
					op += string(q[i])
					i++
				}
				skipSpace()
				if op == "" || i >= n || strings.IndexByte("\"'`", q[i]) < 0 {
					return nil, "", fmt.Errorf("label %s: want an operator and a string", l)
				}
				start := i
				if err := skipString(); err != nil {
					return nil, "", err
				}
				if l == "__name__" && op == "=" {
					name, _ = strconv.Unquote(q[start:i])
				} else {
					labels = append(labels, l)
				}
			default:
				return nil, "", fmt.Errorf("unexpected %q in label matchers", q[i])
			}
		}
	}
	peek := func() byte {
		j := i
		for j < n && strings.IndexByte(" \t\r\n", q[j]) >= 0 {
			j++
		}
		if j < n {
			return q[j]
		}
		return 0
	}

	for i < n {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment, to the end of the line
			for i < n && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return out, err
			}
		case c == '$': // a Grafana variable: $name or ${name}
			i++
			if i < n && q[i] == '{' {
				for i < n && q[i] != '}' {
					i++
				}
				i++
			} else {
				ident()
			}
		case c == '[': // a range or subquery: durations and variables
			for i < n && q[i] != ']' {
				i++
			}
			i++
		case c == '{': // a selector by matchers alone
			labels, name, err := matchers()
			if err != nil {
				return out, err
			}
			if name == "" {
				return out, fmt.Errorf("a selector without a metric name")
			}
			out.selectors = append(out.selectors, selector{name: name, labels: labels})
		case '0' <= c && c <= '9' || c == '.' && i+1 < n && '0' <= q[i+1] && q[i+1] <= '9':
			// a number or a duration (1e-3, 0x1f, 5m, 1h30m)
			start := i
			hex := strings.HasPrefix(q[i:], "0x") || strings.HasPrefix(q[i:], "0X")
			for i < n && (isIdent(q[i]) || q[i] == '.' ||
				(q[i] == '-' || q[i] == '+') && i > start && (q[i-1] == 'e' || q[i-1] == 'E') && !hex) {
				i++
			}
		case isIdentStart(c):
			id := ident()
			lower := strings.ToLower(id)
			switch {
			case groupingKeywords[lower]:
				skipSpace()
				if i < n && q[i] == '(' {
					ls, err := labelList()
					if err != nil {
						return out, err
					}
					out.grouping = append(out.grouping, ls...)
				}
			case otherKeywords[lower]:
			case peek() == '(': // a function
			default:
				s := selector{name: id}
				skipSpace()
				if i < n && q[i] == '{' {
					labels, name, err := matchers()
					if err != nil {
						return out, err
					}
					if name != "" && name != id {
						return out, fmt.Errorf("%s{__name__=%q}", id, name)
					}
					s.labels = labels
				}
				out.selectors = append(out.selectors, s)
			}
		default: // operators, parentheses, commas, @
			i++
		}
	}
	return out, nil
}
