package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"switchyard.dev/pkg/replay"
)

// htmlNode is an element of the page as encoding/xml reads it.
type htmlNode struct {
	name     string
	attrs    map[string]string
	children []*htmlNode
	text     strings.Builder // all the text below it
}

// parsePage reads the page strictly, as XML (the page is polyglot markup:
// every element closed, every attribute quoted), and returns its root.
func parsePage(t *testing.T, page []byte) *htmlNode {
	t.Helper()
	if !bytes.HasPrefix(page, []byte("<!DOCTYPE html>\n")) {
		t.Fatalf("page does not start with the HTML doctype: %.40q", page)
	}
	d := xml.NewDecoder(bytes.NewReader(page))
	root := &htmlNode{name: "#document"}
	stack := []*htmlNode{root}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("page is not well-formed: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			n := &htmlNode{name: tok.Name.Local, attrs: map[string]string{}}
			for _, a := range tok.Attr {
				n.attrs[a.Name.Local] = a.Value
			}
			top := stack[len(stack)-1]
			top.children = append(top.children, n)
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			for _, n := range stack {
				n.text.Write(tok)
			}
		}
	}
	if len(stack) != 1 {
		t.Fatalf("%d elements left open", len(stack)-1)
	}
	return root
}

// all are the elements named name below n, in document order.
func (n *htmlNode) all(name string) []*htmlNode {
	var out []*htmlNode
	for _, c := range n.children {
		if c.name == name {
			out = append(out, c)
		}
		out = append(out, c.all(name)...)
	}
	return out
}

func (n *htmlNode) textOf() string { return strings.Join(strings.Fields(n.text.String()), " ") }

// checkPage checks a page against the rows it shows: one SVG per plot, one
// table row per (policy, concurrency) with the rows' figures, nothing to
// fetch.
func checkPage(t *testing.T, page []byte, rows []replay.Row) {
	t.Helper()
	doc := parsePage(t, page)
	if got := len(doc.all("html")); got != 1 {
		t.Fatalf("%d <html> elements", got)
	}
	figs := doc.all("figure")
	if len(figs) != 4 {
		t.Fatalf("%d figures, want 4", len(figs))
	}
	for _, f := range figs {
		if n := len(f.all("svg")); n != 1 {
			t.Errorf("figure %s holds %d <svg>", f.attrs["id"], n)
		}
		if !strings.Contains(f.textOf(), "concurrency") {
			t.Errorf("figure %s has no concurrency axis", f.attrs["id"])
		}
		for i, p := range uniquePolicies(rows) { // the legend
			if !strings.Contains(f.textOf(), p) {
				t.Errorf("figure %s: legend lacks %s (%d)", f.attrs["id"], p, i)
			}
		}
	}
	if n := len(doc.all("svg")); n != 4 {
		t.Errorf("%d <svg> in the page, want 4", n)
	}
	// Seed spread: error bars wherever some point's seeds differ.
	if spread := regexp.MustCompile(`<line [^>]*stroke-width="1.5"/>`); len(spread.FindAll(page, -1)) == 0 {
		t.Error("no error bars")
	}
	for _, name := range []string{"script", "img", "link", "iframe", "object"} {
		if n := len(doc.all(name)); n != 0 {
			t.Errorf("%d <%s> elements", n, name)
		}
	}
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?\s*(https?:|//)|url\(|@import`).Find(page); ext != nil {
		t.Errorf("page fetches something: %q", ext)
	}

	tables := doc.all("table")
	if len(tables) != 1 {
		t.Fatalf("%d tables", len(tables))
	}
	head := tables[0].all("th")
	body := tables[0].all("tbody")[0].all("tr")
	if len(body) != len(rows) {
		t.Fatalf("%d table rows for %d rows", len(body), len(rows))
	}
	seen := map[string]bool{}
	for i, tr := range body {
		r := rows[i]
		tds := tr.all("td")
		if len(tds) != len(head) || len(tds) != len(htmlColumns) {
			t.Fatalf("row %d: %d cells, %d headers", i, len(tds), len(head))
		}
		want := []string{r.Policy}
		for _, c := range htmlCells(r) {
			want = append(want, strings.TrimSpace(c.Value+" "+c.Range))
		}
		for j, td := range tds {
			if got := td.textOf(); got != want[j] {
				t.Errorf("row %d (%s cc=%d) %s: %q, want %q", i, r.Policy, r.Concurrency, htmlColumns[j], got, want[j])
			}
		}
		key := tds[0].textOf() + "/" + tds[1].textOf()
		if seen[key] {
			t.Errorf("two table rows for %s", key)
		}
		seen[key] = true
	}
}

// pageParams are the header's name: value pairs.
func pageParams(doc *htmlNode) map[string]string {
	m := map[string]string{}
	for _, dl := range doc.all("dl") {
		var name string
		for _, c := range dl.children {
			switch c.name {
			case "dt":
				name = c.textOf()
			case "dd":
				m[name] = c.textOf()
			}
		}
	}
	return m
}

func uniquePolicies(rows []replay.Row) []string {
	p, _ := plotPolicies(rows)
	return p
}

func TestReplayHTMLEndToEnd(t *testing.T) {
	dir := t.TempDir()
	jsonOut, page, merged := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html"), filepath.Join(dir, "m.html")
	replaySmall(t, "5m", "--policies", "round_robin,kv,oracle", "--json", jsonOut, "--html", page)
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var rf runFile
	if err := json.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	if len(rf.Rows) != 6 {
		t.Fatalf("%d rows", len(rf.Rows))
	}
	got, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	checkPage(t, got, rf.Rows)
	doc := parsePage(t, got)
	params := pageParams(doc)
	for k, want := range map[string]string{"trace": smallTrace, "cluster": "2 workers × llama-3.1-8b@h100-sxm",
		"KV per worker": "4096 tokens (256 blocks of 16)", "seeds": "2 (first 1)", "warmup": "60 s", "window": "300 s",
		"policies": "round_robin, kv, oracle", "concurrency": "1, 2", "split": "all", "rows": "6"} {
		if params[k] != want {
			t.Errorf("parameter %s: %q, want %q", k, params[k], want)
		}
	}
	if h1 := doc.all("h1")[0].textOf(); h1 != "Replay of "+smallTrace {
		t.Errorf("heading %q", h1)
	}
	cmd := doc.all("pre")[0].textOf()
	if !strings.Contains(cmd, "--gpu-blocks 256") || strings.Contains(cmd, "--html") {
		t.Errorf("command %q: want the experiment's flags, not the output's", cmd)
	}

	// --merge writes the same page from the JSON.
	mustRun(t, "replay", "--merge", jsonOut, "--html", merged)
	again, err := os.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, again) {
		t.Error("the page of --merge of the run's JSON differs from the run's")
	}
}

func TestHTMLEscapesAndSkipsMissingFigures(t *testing.T) {
	row := func(pol string, c int, tpm float64) replay.Row {
		return replay.Row{Policy: pol, Concurrency: c, Seeds: 2, WindowS: 60,
			TurnsPerMin: tpm, TurnsPerMinMin: tpm - 1, TurnsPerMinMax: tpm + 1,
			ThroughputTokensPerS: 100 * tpm, ThroughputTokensPerSMin: 90 * tpm, ThroughputTokensPerSMax: 110 * tpm,
			PrefixHitRate: 0.5, PrefixHitRateMin: 0.4, PrefixHitRateMax: 0.6,
			TTFTP50Ms: 120, TTFTP50MsMin: 100, TTFTP50MsMax: 140}
	}
	rows := []replay.Row{row(`<b>&"x"`, 1, 3), row("kv", 1, 4), row(`<b>&"x"`, 8, 20), row("kv", 8, 25)}
	page, err := htmlReport(runFile{Command: "switchyard replay --trace <t>", Trace: `a<b>&"c".json`,
		Config: map[string]any{"workers": 4, "perf": "p&q", "hints": nil}, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	checkPage(t, page, rows)
	if bytes.Contains(page, []byte("<b>")) || bytes.Contains(page, []byte("<t>")) {
		t.Error("text not escaped")
	}
	params := pageParams(parsePage(t, page))
	for k, want := range map[string]string{"trace": `a<b>&"c".json`, "cluster": "4 workers × p&q", "hints": "off"} {
		if params[k] != want {
			t.Errorf("parameter %s: %q, want %q", k, params[k], want)
		}
	}
	// The figures as written, independently of htmlCells.
	tds := parsePage(t, page).all("tbody")[0].all("tr")[2].all("td")
	var cells []string
	for _, td := range tds {
		cells = append(cells, td.textOf())
	}
	if got, want := strings.Join(cells, " | "), `<b>&"x" | 8 | 2 | 20.0 [19.0, 21.0] | 2000 [1800, 2200] | 0.500 [0.400, 0.600] | 0.000 | 120 [100, 140] | 0 [0, 0] | 0`; got != want {
		t.Errorf("row 2:\n got %s\nwant %s", got, want)
	}
	// No p99 and no ideal in these rows: one TTFT panel, no ideal line.
	if n := strings.Count(string(page), "TTFT p99, ms"); n != 0 {
		t.Errorf("a p99 panel without p99s (%d)", n)
	}
	if bytes.Contains(page, []byte(`stroke-dasharray="2,3"`)) {
		t.Error("an ideal line without ideals")
	}
}
