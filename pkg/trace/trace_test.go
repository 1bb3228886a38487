package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"switchyard.dev/pkg/kv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readFile reads one file the way servicekit/tracefile.ReadFile does (the
// package opens no file itself).
func readFile(path string, f Format, file int, o Options) (*Workload, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return Read(fh, f, file, filepath.Base(path), o)
}

func load(t *testing.T, name string, f Format) *Workload {
	t.Helper()
	w, err := readFile(filepath.Join("testdata", name), f, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestReadWeka(t *testing.T) {
	w := load(t, "weka_small.json", FormatWeka)
	if w.BlockSize != 64 || len(w.Sessions) != 2 {
		t.Fatalf("block size %d, %d sessions", w.BlockSize, len(w.Sessions))
	}
	p, c := w.Sessions[0], w.Sessions[1]
	if p.ID != "trace_test" || p.Parent != -1 || c.ID != "trace_test/agent_001" || c.Parent != 0 {
		t.Fatalf("sessions %q(%d) %q(%d)", p.ID, p.Parent, c.ID, c.Parent)
	}
	if len(p.Turns) != 3 || len(c.Turns) != 2 {
		t.Fatalf("turns %d, %d", len(p.Turns), len(c.Turns))
	}
	// think_time is the gap before a turn; the first turn has none.
	gaps := []time.Duration{0, 3500 * time.Millisecond, 10 * time.Second}
	for i, g := range gaps {
		if p.Turns[i].Gap != g {
			t.Errorf("turn %d gap %v, want %v", i, p.Turns[i].Gap, g)
		}
	}
	// The turn after the sub-agent marker waits for it.
	if diff := cmp.Diff([]int{1}, p.Turns[2].Children); diff != "" {
		t.Errorf("children: %s", diff)
	}
	if !p.Turns[0].ToolCall || p.Turns[2].ToolCall {
		t.Error("tool_use stop not mapped")
	}
	// Ids are namespaced by file, shared within it.
	if p.Turns[0].Blocks[0] != p.Turns[1].Blocks[0] || p.Turns[0].Blocks[0] != namespace(1, 1) {
		t.Errorf("blocks %v", p.Turns[0].Blocks)
	}
	w2, err := readFile(filepath.Join("testdata", "weka_small.json"), FormatWeka, 2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w2.Sessions[0].Turns[0].Blocks[0] == p.Turns[0].Blocks[0] {
		t.Error("two files share hash ids")
	}
	st := w.Stats()
	if st.Sessions != 2 || st.TopLevel != 1 || st.Turns != 5 || st.InputTokens != 200+300+400+130+140 {
		t.Errorf("stats %+v", st)
	}
	// Ideal hits: turn 2 reuses 3 of 4, turn 3 reuses 4 of 6, the
	// sub-agent's second turn 2 of 2: 9 of 17 blocks.
	if want := 9.0 / 17; w.IdealHitRate() != want {
		t.Errorf("ideal hit rate %v, want %v", w.IdealHitRate(), want)
	}
}

func TestReadWekaGzipAndMerge(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "weka_small.json"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	a, err := Read(&buf, FormatWeka, 1, "a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Read(bytes.NewReader(raw), FormatWeka, 2, "b", Options{})
	if err != nil {
		t.Fatal(err)
	}
	all := &Workload{}
	if err := all.Merge(a); err != nil {
		t.Fatal(err)
	}
	if err := all.Merge(b); err != nil {
		t.Fatal(err)
	}
	if err := all.Validate(); err != nil {
		t.Fatal(err)
	}
	if all.Sessions[3].Parent != 2 || all.Sessions[2].Turns[2].Children[0] != 3 {
		t.Errorf("merge did not offset indices: parent %d children %v", all.Sessions[3].Parent, all.Sessions[2].Turns[2].Children)
	}
}

func TestReadMooncake(t *testing.T) {
	w := load(t, "mooncake_small.jsonl", FormatMooncake)
	if w.BlockSize != 512 || len(w.Sessions) != 5 {
		t.Fatalf("block %d sessions %d", w.BlockSize, len(w.Sessions))
	}
	if got := w.Sessions[0].Turns[0]; got.InputLen != 6758 || got.OutputLen != 500 || len(got.Blocks) != 14 {
		t.Errorf("row 0: %+v", got)
	}
	// All rows share block 0 (the system prompt).
	if w.Sessions[1].Turns[0].Blocks[0] != w.Sessions[0].Turns[0].Blocks[0] {
		t.Error("shared first block lost")
	}

	s := load(t, "mooncake_sessions.jsonl", FormatMooncake)
	if len(s.Sessions) != 2 || len(s.Sessions[0].Turns) != 2 {
		t.Fatalf("sessions %d", len(s.Sessions))
	}
	if g := s.Sessions[0].Turns[1].Gap; g != 2*time.Second {
		t.Errorf("delay gap %v", g)
	}
	if s.Sessions[1].Start != 5*time.Millisecond {
		t.Errorf("start %v", s.Sessions[1].Start)
	}
}

func TestReadAgenticMooncake(t *testing.T) {
	w := load(t, "agentic_mooncake.jsonl", FormatAgenticMooncake)
	if len(w.Sessions) != 2 {
		t.Fatalf("sessions %d", len(w.Sessions))
	}
	p, c := w.Sessions[0], w.Sessions[1]
	if c.Parent != 0 || len(p.Turns) != 2 || len(c.Turns) != 2 {
		t.Fatalf("parent %d turns %d/%d", c.Parent, len(p.Turns), len(c.Turns))
	}
	if diff := cmp.Diff([]int{1}, p.Turns[1].Children); diff != "" {
		t.Errorf("children: %s", diff)
	}
	// delay + tool_wait_ms.
	if g := c.Turns[1].Gap; g != 500*time.Millisecond {
		t.Errorf("child gap %v", g)
	}
	if g := p.Turns[1].Gap; g != 1050*time.Millisecond {
		t.Errorf("parent gap %v", g)
	}
}

// Two agentic rows with one request_id would make a wait for it mean
// either (the later one used to replace the earlier, moving the sub-agent's
// spawn without a word): the trace is refused, naming the file, both lines
// and the id. A plain Mooncake trace waits for nothing, so its request ids
// are not read.
func TestReadMooncakeDuplicateRequestIDs(t *testing.T) {
	data := `{"request_id": "p1", "session_id": "parent", "timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}
{"request_id": "p1", "session_id": "parent", "delay": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}
{"request_id": "c1", "session_id": "child", "wait_for": ["p1"], "input_length": 10, "output_length": 1, "hash_ids": [2]}`
	_, err := Read(strings.NewReader(data), FormatAgenticMooncake, 1, "dup.jsonl", Options{})
	if want := `mooncake dup.jsonl:2: request_id "p1", which a wait_for names, already on line 1`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("agentic: %v, want it to say %q", err, want)
	}
	// Ids that no wait names may repeat: nothing depends on which is which.
	unnamed := strings.Replace(data, `"wait_for": ["p1"], `, "", 1)
	if w, err := Read(strings.NewReader(unnamed), FormatAgenticMooncake, 1, "dup.jsonl", Options{}); err != nil || len(w.Sessions) != 2 {
		t.Errorf("agentic, no wait on the repeated id: %v", err)
	}
	if _, err := Read(strings.NewReader(data), FormatMooncake, 1, "dup.jsonl", Options{}); err != nil {
		t.Errorf("plain: %v", err)
	}
}

func TestReadDynamo(t *testing.T) {
	w := load(t, "dynamo_small.jsonl", FormatDynamo)
	if w.BlockSize != 64 || len(w.Sessions) != 2 {
		t.Fatalf("block %d sessions %d", w.BlockSize, len(w.Sessions))
	}
	s1, s2 := w.Sessions[0], w.Sessions[1]
	if s1.ID != "s1" || len(s1.Turns) != 2 || s2.Parent != 0 {
		t.Fatalf("s1 %q %d turns; s2 parent %d", s1.ID, len(s1.Turns), s2.Parent)
	}
	if g := s1.Turns[1].Gap; g != time.Second {
		t.Errorf("gap %v", g)
	}
	if !s1.Turns[0].ToolCall || s1.Turns[1].ToolCall {
		t.Error("tool calls")
	}
	if diff := cmp.Diff([]int{1}, s1.Turns[1].Children); diff != "" {
		t.Errorf("children: %s", diff)
	}
	if diff := cmp.Diff([]uint64{11, 12, 13, 14}, s1.Turns[1].Blocks); diff != "" {
		t.Errorf("blocks: %s", diff)
	}
}

func TestReadErrors(t *testing.T) {
	for _, tc := range []struct {
		f    Format
		data string
	}{
		{FormatWeka, `{"block_size": 0, "requests": []}`},
		{FormatWeka, `{"block_size": 64, "requests": [{"in": 10, "out": 1, "hash_ids": [1]}]}`},
		{FormatWeka, `[`},
		{FormatMooncake, `{"input_length": 10, "hash_ids": [1]}`},
		{FormatMooncake, `{"input_length": 10, "output_length": 1, "hash_ids": [1, 2]}`},
		{FormatDynamo, `{"schema": "x", "event_type": "tool_end"}`},
		{FormatDynamo, `not json`},
		// Counts past maxTokens, which replay's token arithmetic cannot hold.
		{FormatWeka, `{"block_size": 64, "requests": [{"in": 10, "out": 1000000000000}]}`},
		{FormatWeka, `{"block_size": 64, "requests": [{"in": 1000000000000, "out": 1}]}`},
		{FormatWeka, `{"block_size": 4611686018427387904, "requests": [{"in": 10, "out": 1, "hash_ids": [1, 2, 3, 4]}]}`},
		{FormatMooncake, `{"input_length": 10, "output_length": 1000000000000, "hash_ids": [1]}`},
		{FormatDynamo, `{"schema": "dynamo.request.trace.v1", "event_type": "request_end", "request": {"request_id": "r", "replay": {"trace_block_size": 4611686018427387904, "input_length": 10, "input_sequence_hashes": [1, 2, 3, 4]}}}`},
		// Two sessions in one Weka file: the second would be dropped.
		{FormatWeka, `{"block_size": 64, "requests": [{"in": 10, "out": 1}]}` + "\n" + `{"block_size": 64, "requests": [{"in": 10, "out": 1}]}`},
		// Empty files, as the Dynamo and Weka importers refuse theirs.
		{FormatMooncake, ``},
		{FormatMooncake, "\n  \n"},
	} {
		if _, err := Read(strings.NewReader(tc.data), tc.f, 1, "x", Options{}); err == nil {
			t.Errorf("%s %q: no error", tc.f, tc.data)
		}
	}
}

// An error about a record names where it was read, so that an operator
// can find it: its file and line in a recording of several files (whose
// records tracefile.Load joins into one workload), its line in one file.
func TestDynamoErrorsNameTheRecordsFileAndLine(t *testing.T) {
	row := func(sid string, recv uint64, from, to string) string {
		return strings.Replace(dynamoRow(sid, "", recv), from, to, 1)
	}
	const block, hashes = `"trace_block_size": 16`, `"input_sequence_hashes": [1]`
	for _, tc := range []struct{ name, bad, want string }{
		{"block size past the bound", row("b", 3, block, `"trace_block_size": 4611686018427387904`),
			`trace: dynamo rec: trace.000001.jsonl.gz:2: request "r-b": trace_block_size 4611686018427387904`},
		{"more hashes than tokens", row("b", 3, hashes, `"input_sequence_hashes": [1, 2, 3]`),
			`trace: dynamo rec: trace.000001.jsonl.gz:2: request "r-b": 3 hashes of 16 tokens for 10 input tokens`},
		{"block sizes mixed", row("b", 3, block, `"trace_block_size": 64`),
			`trace: dynamo rec: block sizes 16 and 64 mixed: trace.000000.jsonl.gz:1: request "r-a" and trace.000001.jsonl.gz:2: request "r-b"`},
	} {
		var recs []Record
		for _, f := range []struct{ name, data string }{
			{"trace.000000.jsonl.gz", dynamoRow("a", "", 1)},
			{"trace.000001.jsonl.gz", dynamoRow("c", "", 2) + "\n" + tc.bad},
		} {
			part, _, err := ReadRecords(strings.NewReader(f.data), f.name)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, part...)
		}
		if _, err := DynamoWorkload(recs, "rec"); err == nil || err.Error() != tc.want {
			t.Errorf("%s, across files: %v, want %q", tc.name, err, tc.want)
		}
		// One file: the workload is the file's, and the error names the line.
		data := dynamoRow("a", "", 1) + "\n" + tc.bad
		want := strings.NewReplacer("trace: dynamo rec:", "trace: dynamo x.jsonl:", "trace.000000.jsonl.gz:1:", "line 1:",
			"trace.000001.jsonl.gz:2:", "line 2:").Replace(tc.want)
		if _, err := Read(strings.NewReader(data), FormatDynamo, 1, "x.jsonl", Options{}); err == nil || err.Error() != want {
			t.Errorf("%s, one file: %v, want %q", tc.name, err, want)
		}
	}
}

// A stream that stops being readable (a truncated gzip member, a line past
// maxLine) is refused with the line it stopped at.
func TestReadErrorsNameTheLine(t *testing.T) {
	row := `{"input_length": 10, "output_length": 1, "hash_ids": [1]}` + "\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(strings.Repeat(row, 1000)))
	zw.Close()
	truncated := gz.Bytes()[:gz.Len()-4] // the trailer cut: every line reads, then the stream fails
	long := strings.Repeat(row, 2) + `{"hash_ids": [` + strings.Repeat("1,", maxLine/2) + "1]}\n"
	for _, tc := range []struct {
		name string
		f    Format
		data []byte
		want string
	}{
		{"truncated gzip", FormatMooncake, truncated, "x: line 1001: unexpected EOF"},
		{"long line", FormatMooncake, []byte(long), "x: line 3: longer than 64 MiB"},
		{"long line", FormatDynamo, []byte(long), "x: line 3: longer than 64 MiB"},
	} {
		_, err := Read(bytes.NewReader(tc.data), tc.f, 1, "x", Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want it to say %q", tc.f, tc.name, err, tc.want)
		}
	}
}

// A writer killed mid-record leaves a line whose JSON stops short (the
// last, or one a restarted writer appended after), or a gzip member that
// breaks off at the end: the records around it are read, and what was
// dropped is counted for the caller's warning. Any other line that is not
// a record is still an error: JSON gone wrong rather than stopping short,
// JSON that is not a record, and a gzip stream that is corrupt rather than
// cut.
func TestReadRecordsCutLines(t *testing.T) {
	a, b := dynamoRow("a", "", 1), dynamoRow("b", "", 2)
	env := `{"timestamp": 10, "event": ` + b + `}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(a + "\n" + b))
	zw.Close()
	gzCut := string(gz.Bytes()[:gz.Len()-20]) // the end of b and the trailer gone
	zr, _ := gzip.NewReader(strings.NewReader(gzCut))
	left, _ := io.ReadAll(zr) // what of the stream is there
	gzCutLine := len(left) - bytes.LastIndexByte(left, '\n') - 1
	// The recorder's own gzip: a member per write, the last one broken off
	// at a line's end.
	var members bytes.Buffer
	for _, line := range []string{a + "\n", b + "\n"} {
		zw := gzip.NewWriter(&members)
		zw.Write([]byte(line))
		zw.Close()
	}
	gzTornAtLine := members.String()[:members.Len()-4] // the last member's size gone
	gzCorrupt := []byte(gz.String())
	gzCorrupt[len(gzCorrupt)-6] ^= 0xff // its checksum wrong
	for _, tc := range []struct {
		name string
		data string
		recs int
		cut  Cut
		err  string // what the error says; "" none
	}{
		{"whole", a + "\n" + b + "\n", 2, Cut{}, ""},
		{"whole, no newline at the end", a + "\n" + b, 2, Cut{}, ""},
		{"last line cut", a + "\n" + b[:40], 1, Cut{Lines: 1, FirstLine: 2, Bytes: 40}, ""},
		{"last envelope cut", a + "\n" + env[:len(env)-1], 1, Cut{Lines: 1, FirstLine: 2, Bytes: len(env) - 1}, ""},
		{"cut after a blank line", a + "\n\n  " + b[:9], 1, Cut{Lines: 1, FirstLine: 3, Bytes: 9}, ""},
		{"only line cut", b[:40], 0, Cut{Lines: 1, FirstLine: 1, Bytes: 40}, ""},
		{"cut in a fraction", a + "\n" + `{"event": {"ttft_ms": 12.`, 1, Cut{Lines: 1, FirstLine: 2, Bytes: 25}, ""},
		{"cut in a literal", a + "\n" + `{"event": {"session_final": tru`, 1, Cut{Lines: 1, FirstLine: 2, Bytes: 31}, ""},
		{"cut in an escape", a + "\n" + `{"event": {"s": "\u00`, 1, Cut{Lines: 1, FirstLine: 2, Bytes: 21}, ""},
		{"gzip member cut mid-line", gzCut, 1, Cut{Lines: 1, FirstLine: 2, Bytes: gzCutLine, Torn: true}, ""},
		{"gzip member cut after a whole line", gzTornAtLine, 2, Cut{Torn: true}, ""},
		{"a line cut, then a restarted writer's", a + "\n" + b[:40] + "\n" + b + "\n", 2, Cut{Lines: 1, FirstLine: 2, Bytes: 40}, ""},
		{"bad line in the middle", a + "\n" + "x" + b[1:] + "\n" + b + "\n", 0, Cut{}, "line 2: "},
		{"last line cut, newline after it", a + "\n" + b[:40] + "\n", 1, Cut{Lines: 1, FirstLine: 2, Bytes: 40}, ""},
		{"last line JSON but not a record", a + "\n" + `{"schema": 5}`, 0, Cut{}, "line 2: "},
		{"last line whole but one brace too many", a + "\n" + b + "}", 0, Cut{}, "line 2: "},
		{"last line whole but a quote lost", a + "\n" + strings.Replace(b, `"request_end"`, `"request_end`, 1), 0, Cut{}, "line 2: "},
		{"one line, not JSON at all", "id,time,tokens", 0, Cut{}, "line 1: "},
		{"gzip stream corrupt", string(gzCorrupt), 0, Cut{}, "gzip: invalid checksum"},
	} {
		r, err := Decompress(strings.NewReader(tc.data))
		if err != nil {
			t.Fatal(err)
		}
		recs, cut, err := ReadRecords(r, "x")
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want it to say %q", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case len(recs) != tc.recs || cut != tc.cut:
			t.Errorf("%s: %d records, cut %+v; want %d, %+v", tc.name, len(recs), cut, tc.recs, tc.cut)
		}
	}
	// Cut anywhere, a recorder's own line reads as cut: inside a float, a
	// literal, an escape the recorder writes (<, as \u003c), a key.
	rec := Envelope{Timestamp: 10, Event: &Record{Schema: Schema, EventType: EventRequestEnd, EventTimeUnixMs: 5,
		AgentContext: &AgentContext{SessionID: "<s>", SessionFinal: true},
		Request:      &RequestMetrics{RequestID: "r", TTFTMs: F64(12.5), KVHitRate: F64(1e-7)}}}
	line, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(line); i++ {
		recs, cut, err := ReadRecords(strings.NewReader(a+"\n"+string(line[:i])), "x")
		if err != nil || len(recs) != 1 || cut != (Cut{Lines: 1, FirstLine: 2, Bytes: i}) {
			t.Fatalf("a recorded line cut after %d bytes (%s): %d records, %+v, %v", i, line[:i], len(recs), cut, err)
		}
	}
	// Replay's importer reads the records before the cut too, and hands
	// its caller the warning to show.
	w, err := Read(strings.NewReader(a+"\n"+b[:40]), FormatDynamo, 1, "x", Options{})
	if err != nil {
		t.Fatalf("ReadDynamo of a cut last line: %v", err)
	}
	if len(w.Sessions) != 1 || !slices.Equal(w.Warnings, []string{"x: line 2 is cut off mid-record: dropped its 40 bytes (a writer stopped while writing)"}) {
		t.Errorf("ReadDynamo of a cut last line: %d sessions, warnings %q", len(w.Sessions), w.Warnings)
	}
	whole := &Workload{}
	if err := whole.Merge(w); err != nil || !slices.Equal(whole.Warnings, w.Warnings) {
		t.Errorf("merged: %v, warnings %q", err, whole.Warnings)
	}
}

// dynamoRow is a request_end record of session sid (parent: its parent
// session) received at recv ms.
// tenantRow is dynamoRow for a request of tenant.
func tenantRow(tenant, sid, parent string, recv uint64) string {
	return strings.Replace(dynamoRow(sid, parent, recv), `"agent_context": {`, fmt.Sprintf(`"agent_context": {"tenant": %q, `, tenant), 1)
}

func dynamoRow(sid, parent string, recv uint64) string {
	return fmt.Sprintf(`{"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": %d, `+
		`"agent_context": {"session_id": %q, "parent_session_id": %q}, "request": {"request_id": "r-%s", "request_received_ms": %d, `+
		`"replay": {"trace_block_size": 16, "input_length": 10, "input_sequence_hashes": [1]}}}`, recv, sid, parent, sid, recv)
}

// A cycle of waits longer than two (a → b → c → a) is an agentic
// Mooncake trace's error: the importer refuses it, naming the cycle and
// the file, rather than return sessions that would never start
// (cmd/switchyard's TestACyclicTraceIsRefusedWhenLoaded sees it through
// replay).
func TestReadParentCycles(t *testing.T) {
	data := `{"request_id": "a1", "session_id": "a", "wait_for": ["c1"], "input_length": 10, "output_length": 1, "hash_ids": [1]}
{"request_id": "b1", "session_id": "b", "wait_for": ["a1"], "input_length": 10, "output_length": 1, "hash_ids": [1]}
{"request_id": "c1", "session_id": "c", "wait_for": ["b1"], "input_length": 10, "output_length": 1, "hash_ids": [1]}`
	_, err := Read(strings.NewReader(data), FormatAgenticMooncake, 1, "cycle.jsonl", Options{})
	if err == nil || !strings.Contains(err.Error(), "form a cycle") || !strings.Contains(err.Error(), "cycle.jsonl") {
		t.Errorf("a cycle of waits: %v, want it refused, naming the cycle and the file", err)
	}
}

// In a recorded trace the parents are what clients sent, and a cycle of
// them of any length is handled as a self-link is: the link that closes
// it, the one of the session received last, is dropped, and that session
// is top-level with the others under it, whatever order the file's lines
// are in. A sub-agent of a cycle's session keeps its parent.
func TestReadDynamoParentCycles(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		var rows []string
		for i := range n {
			rows = append(rows, dynamoRow(fmt.Sprint("s", i), fmt.Sprint("s", (i+1)%n), uint64(i)))
		}
		rows = append(rows, dynamoRow("kid", "s0", uint64(n)))
		for _, order := range []string{"received", "reversed"} {
			if order == "reversed" {
				slices.Reverse(rows)
			}
			w, err := Read(strings.NewReader(strings.Join(rows, "\n")), FormatDynamo, 1, "x", Options{})
			if err != nil {
				t.Fatalf("cycle of %d, lines %s: %v", n, order, err)
			}
			if err := w.Validate(); err != nil {
				t.Fatalf("cycle of %d, lines %s: %v", n, order, err)
			}
			var got, want []string
			for i, s := range w.Sessions {
				parent := "-"
				if s.Parent >= 0 {
					parent = w.Sessions[s.Parent].ID
				}
				got = append(got, s.ID+" ← "+parent)
				switch {
				case i == n:
					want = append(want, "kid ← s0")
				case i == n-1:
					want = append(want, s.ID+" ← -")
				default:
					want = append(want, fmt.Sprintf("s%d ← s%d", i, i+1))
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("cycle of %d, lines %s: sessions ← parents (-want +got):\n%s", n, order, diff)
			}
		}
	}
}

// A receipt time far from the others (a garbage or mis-scaled
// request_received_ms) clamps to a year, as the other importers' times do,
// instead of overflowing into a negative start or gap.
func TestReadDynamoHugeTimes(t *testing.T) {
	const far = 50_000_000_000_000_000 // ×1e6 ns wraps negative in an int64
	data := dynamoRow("a", "", 0) + "\n" + dynamoRow("b", "", far) + "\n" + dynamoRow("a", "", far)
	w, err := Read(strings.NewReader(data), FormatDynamo, 1, "x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	year := 365 * 24 * time.Hour
	if s := w.Sessions[1].Start; s < 0 || s > year {
		t.Errorf("start %v", s)
	}
	if g := w.Sessions[0].Turns[1].Gap; g < 0 || g > year {
		t.Errorf("gap %v", g)
	}
}

func TestPerfetto(t *testing.T) {
	fh, err := os.Open(filepath.Join("testdata", "dynamo_small.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	recs, _, err := ReadRecords(fh, "x")
	if err != nil {
		t.Fatal(err)
	}
	doc := perfettoOf(t, recs)
	count := map[string]int{}
	pids := map[int]bool{}
	for _, e := range doc.TraceEvents {
		count[e.Name]++
		if e.Ph == "X" {
			pids[e.Pid] = true
		}
	}
	// One process (s2 is s1's sub-agent), three requests, stages, one tool
	// gap between s1's turns and one harness tool slice.
	if len(pids) != 1 || count["process_name"] != 1 || count["LLM request: m"] != 1 || count["LLM request: model"] != 2 {
		t.Errorf("pids %v counts %v", pids, count)
	}
	if count["tool"] != 1 || count["bash"] != 1 || count["prefill"] != 2 || count["decode"] != 2 {
		t.Errorf("counts %v", count)
	}
	if count["thread_name"] != 3 { // s1, sub-agent s2, s1's tool track
		t.Errorf("threads %d", count["thread_name"])
	}
}

// memFiles is an in-memory Opener: the file sink decides the files, the
// test keeps them.
type memFiles map[string]*bytes.Buffer

type memFile struct{ *bytes.Buffer }

func (memFile) Close() error { return nil }

func (m memFiles) open(path string, fresh bool) (io.WriteCloser, error) {
	if m[path] == nil {
		m[path] = &bytes.Buffer{}
	} else if fresh {
		return nil, fs.ErrExist
	}
	return memFile{m[path]}, nil
}

// A garbage duration (1e308 ms) is clamped, not turned into an infinite
// timestamp that fails the whole export.
func TestPerfettoHugeDurations(t *testing.T) {
	data := `{"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 1700000001000, "request": {"request_id": "r1", "total_time_ms": 1e308, "ttft_ms": 1e308}}
{"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 1700000001000, "request": {"request_id": "r2", "request_received_ms": 1700000000000, "total_time_ms": 1000}}
{"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": 1700000001500, "agent_context": {"session_id": "s1"}, "tool": {"tool_call_id": "t1", "tool_class": "bash", "duration_ms": 1e308}}`
	recs, _, err := ReadRecords(strings.NewReader(data), "x")
	if err != nil {
		t.Fatal(err)
	}
	perfettoOf(t, recs)
}

// perfettoDoc is WritePerfetto's output, read back.
type perfettoDoc struct {
	DisplayTimeUnit string       `json:"displayTimeUnit"`
	TraceEvents     []traceEvent `json:"traceEvents"`
}

// perfettoOf exports recs and reads the export back as JSON.
func perfettoOf(t *testing.T, recs []Record) perfettoDoc {
	t.Helper()
	var buf bytes.Buffer
	if err := WritePerfetto(&buf, recs, PerfettoOptions{}); err != nil {
		t.Fatal(err)
	}
	var doc perfettoDoc
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestFileSinkGzipRolls(t *testing.T) {
	files := memFiles{}
	c := DefaultSinkConfig()
	c.FilePath = filepath.Join("dir", "trace")
	c.RollLines = 2
	clock := time.Unix(100, 0)
	s := NewFileSink(c, clock, files.open)
	for i := range 5 {
		r := &Record{Schema: Schema, EventType: EventRequestEnd, Request: &RequestMetrics{RequestID: string(rune('a' + i))}}
		clock = clock.Add(5 * time.Millisecond)
		if err := s.Write(clock, r); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			s.Flush() // two members in the first file
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for n := 0; n < 3; n++ {
		fh, ok := files[s.Path(n)]
		if !ok {
			t.Fatalf("%s not written", s.Path(n))
		}
		r, err := Decompress(fh)
		if err != nil {
			t.Fatal(err)
		}
		recs, _, err := ReadRecords(r, "x")
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			ids = append(ids, rec.Request.RequestID)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "d", "e"}, ids); diff != "" {
		t.Error(diff)
	}
}

func TestSinkConfigFromEnv(t *testing.T) {
	env := map[string]string{"DYN_REQUEST_TRACE": "1", "SWITCHYARD_REQUEST_TRACE_SINKS": "stderr,jsonl", "DYN_REQUEST_TRACE_CAPACITY": "7"}
	c, err := SinkConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || c.Capacity != 7 || c.FileFormat != "jsonl" || len(c.Sinks) != 2 {
		t.Errorf("%+v", c)
	}
	env["SWITCHYARD_REQUEST_TRACE_SINKS"] = "nats"
	if _, err := SinkConfigFromEnv(func(k string) string { return env[k] }); err == nil {
		t.Error("unsupported sink accepted")
	}
}

// The Mooncake README's reference numbers: ideal prefix-hit ratios with an
// infinite cache, in file order.
func TestMooncakeReferenceHitRates(t *testing.T) {
	for _, tc := range []struct {
		file string
		want float64
		rows int
	}{{"conversation_trace.jsonl", 0.366, 12031}, {"synthetic_trace.jsonl", 0.640, 3993}} {
		if testing.Short() {
			t.Skip("-short: decodes 4 MB of traces")
		}
		w, err := readFile(filepath.Join("testdata", "mooncake", tc.file+".gz"), FormatMooncake, 1, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.Stats().Turns; got != tc.rows {
			t.Errorf("%s: %d rows, want %d", tc.file, got, tc.rows)
		}
		if got := w.IdealHitRate(); got < tc.want-0.0005 || got > tc.want+0.0005 {
			t.Errorf("%s: ideal hit rate %.4f, want %.3f", tc.file, got, tc.want)
		}
	}
}

func TestSequenceHashesRoundTrip(t *testing.T) {
	rec := Record{Schema: Schema, EventType: EventRequestEnd, EventTimeUnixMs: 5, AgentContext: &AgentContext{SessionID: "s"},
		Request: &RequestMetrics{RequestID: "r", InputTokens: U64(128), OutputTokens: U64(2),
			Replay: &Replay{TraceBlockSize: 64, InputLength: 128, InputSequenceHashes: SequenceHashes([]kv.BlockHash{7, 1 << 63})}}}
	var buf bytes.Buffer
	s := NewStreamSink(&buf)
	if err := s.Write(time.Time{}, &rec); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	w, err := ReadDynamo(&buf, "x")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{7, 1 << 63}, w.Sessions[0].Turns[0].Blocks); diff != "" {
		t.Error(diff)
	}
}

// Validate takes a sub-agent at any index, its parent's before or after
// it, and refuses tails that are not the session's own sub-agents, parents
// below -1 and cycles of parents (whose sessions would never start).
func TestValidateSessionTrees(t *testing.T) {
	turn := []Turn{{InputLen: 10}}
	for _, tc := range []struct {
		name     string
		sessions []Session
		ok       bool
	}{
		{"child before its parent", []Session{{ID: "c", Parent: 1, Turns: turn}, {ID: "p", Parent: -1, Turns: []Turn{{InputLen: 10, Children: []int{0}}}}}, true},
		{"tail", []Session{{ID: "p", Parent: -1, Turns: turn, Tail: []int{1}}, {ID: "c", Parent: 0, Turns: turn}}, true},
		{"someone else's tail", []Session{{ID: "p", Parent: -1, Turns: turn, Tail: []int{1}}, {ID: "c", Parent: -1, Turns: turn}}, false},
		{"parent below -1", []Session{{ID: "p", Parent: -2, Turns: turn}}, false},
		{"cycle of three", []Session{{ID: "a", Parent: 2, Turns: turn}, {ID: "b", Parent: 0, Turns: turn}, {ID: "c", Parent: 1, Turns: turn}}, false},
	} {
		w := &Workload{Name: tc.name, BlockSize: 16}
		for i := range tc.sessions {
			w.Sessions = append(w.Sessions, &tc.sessions[i])
		}
		if err := w.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestReadDynamoScopesSessionsByTenant: session ids are each tenant's own,
// so two tenants' records with one id are two sessions, and a parent link
// stays within its tenant.
func TestReadDynamoScopesSessionsByTenant(t *testing.T) {
	data := strings.Join([]string{tenantRow("acme", "s", "", 0), tenantRow("bravo", "s", "", 10), tenantRow("acme", "s", "", 20), tenantRow("bravo", "c", "s", 30)}, "\n")
	w, err := Read(strings.NewReader(data), FormatDynamo, 1, "x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Sessions) != 3 {
		t.Fatalf("%d sessions, want acme/s, bravo/s and bravo/c", len(w.Sessions))
	}
	if a, b := w.Sessions[0], w.Sessions[1]; a.ID != "acme/s" || len(a.Turns) != 2 || b.ID != "bravo/s" || len(b.Turns) != 1 {
		t.Fatalf("sessions %q (%d turns), %q (%d turns)", a.ID, len(a.Turns), b.ID, len(b.Turns))
	}
	if p := w.Sessions[2].Parent; p != 1 {
		t.Fatalf("bravo/c's parent is session %d, want bravo/s", p)
	}
	for _, s := range w.Sessions {
		if tenant, _, _ := strings.Cut(s.ID, "/"); s.Tenant != tenant {
			t.Errorf("session %q: tenant %q", s.ID, s.Tenant)
		}
	}
}

// TestPerfettoScopesSessionsByTenant: two tenants' records with one session
// id are two sessions in the trace view too, each its own process.
func TestPerfettoScopesSessionsByTenant(t *testing.T) {
	recs, _, err := ReadRecords(strings.NewReader(tenantRow("acme", "s", "", 1000)+"\n"+tenantRow("bravo", "s", "", 2000)), "x")
	if err != nil {
		t.Fatal(err)
	}
	doc := perfettoOf(t, recs)
	pids := map[int]bool{}
	for _, e := range doc.TraceEvents {
		if e.Ph == "X" {
			pids[e.Pid] = true
		}
	}
	if len(pids) != 2 {
		t.Fatalf("the two tenants' requests drawn in %d processes, want 2", len(pids))
	}
}

// failingFile fails its first write after taking part of it (or none of
// it, with whole), as a full disk does.
type failingFile struct {
	*bytes.Buffer
	failed *bool
	none   bool
}

func (f failingFile) Write(p []byte) (int, error) {
	if !*f.failed {
		*f.failed = true
		n := len(p) / 2
		if f.none {
			n = 0
		}
		f.Buffer.Write(p[:n])
		return n, errors.New("no space left on device")
	}
	return f.Buffer.Write(p)
}

func (failingFile) Close() error { return nil }

// failingFiles is an in-memory Opener whose first write fails (having
// written nothing, with none), and the files it made.
func failingFiles(none bool) (map[string]*bytes.Buffer, Opener) {
	files := map[string]*bytes.Buffer{}
	failed := false
	return files, func(path string, fresh bool) (io.WriteCloser, error) {
		if files[path] != nil && fresh {
			return nil, fs.ErrExist
		}
		files[path] = &bytes.Buffer{}
		return failingFile{files[path], &failed, none}, nil
	}
}

// A flush whose write fails gives its file up: the next flush goes to the
// next numbered file, so that nothing follows the half-written member a
// reader could not get past.
func TestFileSinkGivesUpAFileAWriteFailedIn(t *testing.T) {
	files, open := failingFiles(false)
	c := DefaultSinkConfig()
	c.FilePath = "trace"
	s := NewFileSink(c, time.Unix(100, 0), open)
	for i, id := range []string{"a", "b"} {
		if err := s.Write(time.Unix(100, 0), &Record{Schema: Schema, EventType: EventRequestEnd, Request: &RequestMetrics{RequestID: id}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(); (err != nil) != (i == 0) {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	second := files["trace.000001.jsonl.gz"]
	if second == nil {
		t.Fatalf("files %v: want the second flush in trace.000001.jsonl.gz", slices.Collect(maps.Keys(files)))
	}
	r, err := Decompress(second)
	if err != nil {
		t.Fatal(err)
	}
	recs, cut, err := ReadRecords(r, "x")
	if err != nil || cut.Any() || len(recs) != 1 || recs[0].Request.RequestID != "b" {
		t.Errorf("the second file: %d records, %+v, %v", len(recs), cut, err)
	}
}

// A write that wrote nothing (a full disk) spoiled nothing: the file
// stays, where a new one a flush would fill the disk's inodes.
func TestFileSinkKeepsAFileAWriteLeftAlone(t *testing.T) {
	files, open := failingFiles(true)
	c := DefaultSinkConfig()
	c.FilePath = "trace"
	s := NewFileSink(c, time.Unix(100, 0), open)
	for _, id := range []string{"a", "b"} {
		if err := s.Write(time.Unix(100, 0), &Record{Schema: Schema, EventType: EventRequestEnd, Request: &RequestMetrics{RequestID: id}}); err != nil {
			t.Fatal(err)
		}
		s.Flush()
	}
	if len(files) != 1 || files["trace.000000.jsonl.gz"] == nil {
		t.Fatalf("files %v, want trace.000000.jsonl.gz alone", slices.Collect(maps.Keys(files)))
	}
	r, err := Decompress(files["trace.000000.jsonl.gz"])
	if err != nil {
		t.Fatal(err)
	}
	if recs, cut, err := ReadRecords(r, "x"); err != nil || cut.Any() || len(recs) != 1 || recs[0].Request.RequestID != "b" {
		t.Errorf("the file: %d records, %+v, %v", len(recs), cut, err)
	}
}

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// A stream sink that cannot write says how many records each failure lost,
// all of them in the end: the request-trace metrics count them.
func TestStreamSinkCountsWhatItLoses(t *testing.T) {
	s := NewStreamSink(brokenWriter{})
	lost := 0
	for range 200 {
		lost += Lost(s.Write(time.Now(), &Record{Schema: Schema, EventType: EventRequestEnd}))
	}
	lost += Lost(s.Close())
	if lost != 200 {
		t.Fatalf("lost %d of 200 records", lost)
	}
}
