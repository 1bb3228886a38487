package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// gzipMembers is a recorder's gzip file: one member per flush, each of
// rows lines, and the offsets the members start at.
func gzipMembers(members, rows int) (file []byte, starts []int) {
	var buf bytes.Buffer
	for m := range members {
		starts = append(starts, buf.Len())
		zw := gzip.NewWriter(&buf)
		for i := range rows {
			fmt.Fprintf(zw, `{"timestamp": %d, "event": %s}`+"\n", i, dynamoRow(fmt.Sprint(m, "-", i), "", uint64(1000*m+i)))
		}
		zw.Close()
	}
	starts = append(starts, buf.Len())
	return buf.Bytes(), starts
}

// randomMembers is a recorder's gzip file of n members, each a flush of
// 1 to 20 records of random ids, times and hashes, at the default level;
// contents are the members' content, starts the offsets they start at.
func randomMembers(rng *rand.Rand, n int) (file []byte, contents [][]byte, starts []int) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for range n {
		var c bytes.Buffer
		for range 1 + rng.IntN(20) {
			hs := make([]uint64, rng.IntN(12))
			for i := range hs {
				hs[i] = rng.Uint64() >> rng.IntN(64)
			}
			fmt.Fprintf(&c, `{"timestamp": %d, "event": {"schema": "dynamo.request.trace.v1", "event_type": "request_end", `+
				`"event_time_unix_ms": %d, "agent_context": {"session_id": "s%x"}, "request": {"request_id": "r%x", `+
				`"replay": {"trace_block_size": 16, "input_length": %d, "input_sequence_hashes": %s}}}}`+"\n",
				rng.Uint64N(1e12), rng.Uint64N(1e12), rng.Uint32(), rng.Uint64(), 16*len(hs)+1, strings.ReplaceAll(fmt.Sprint(hs), " ", ","))
		}
		contents = append(contents, c.Bytes())
		starts = append(starts, buf.Len())
		zw.Reset(&buf)
		zw.Write(c.Bytes())
		zw.Close()
	}
	starts = append(starts, buf.Len())
	return buf.Bytes(), contents, starts
}

// An older recorder restarted on the same file wrote on after the member
// its last process tore: the member breaks off in the middle of the file,
// wherever the tear, and the error names the member and where it starts
// rather than a line of the garbage the torn member decodes into, a flate
// offset within the member, or a tear at the end (the torn member's
// decoder may run on through the members after it to the end of the
// file). A tear at the end stays a Cut. Random members and cuts: a
// fixture of near-identical rows tears into the same few shapes.
func TestReadRecordsGzipTornMidFile(t *testing.T) {
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 1))
		for range 60 {
			file, contents, starts := randomMembers(rng, 3+rng.IntN(3))
			last := len(contents)
			torn := 1 + rng.IntN(last-1) // 1-based, not the last
			from, to := starts[torn-1], starts[torn]
			cut := 1 + rng.IntN(to-from-1)
			if torn == 1 {
				cut = max(cut, 2) // the magic whole, or the file is no gzip
			}
			data := append(append([]byte(nil), file[:from+cut]...), file[to:]...)
			whole := bytes.Join(contents[:torn-1], nil)
			b, err := decompressAll(data)
			var me *MemberError
			if !errors.As(err, &me) || me.Member != torn || me.Offset != int64(from) || !me.More || !bytes.HasPrefix(b, whole) {
				t.Fatalf("seed %d: member %d of %d torn after %d of its %d bytes: read %d bytes, %v; "+
					"want the %d before it, then a MemberError for member %d at byte %d", seed, torn, last, cut, to-from, len(b), err, len(whole), torn, from)
			}
			recs, _, err := decompressRecords(data)
			if !errors.As(err, &me) || me.Member != torn || me.Offset != int64(from) || !me.More {
				t.Fatalf("seed %d: member %d of %d torn after %d of its %d bytes: %d records, %v; want a MemberError for member %d at byte %d",
					seed, torn, last, cut, to-from, len(recs), err, torn, from)
			}
			if want := fmt.Sprintf("gzip member %d, at byte %d, breaks off mid-file", torn, from); !strings.Contains(err.Error(), want) {
				t.Fatalf("seed %d: cut after %d bytes: %v, want it to say %q", seed, cut, err, want)
			}

			// Torn at the end: the whole members' records read, the tear a Cut.
			from = starts[last-1]
			cut = 1 + rng.IntN(len(file)-from-1)
			whole = bytes.Join(contents[:last-1], nil)
			if b, err = decompressAll(file[:from+cut]); err != io.ErrUnexpectedEOF || !bytes.HasPrefix(b, whole) {
				t.Fatalf("seed %d: the last member torn after %d bytes: read %d bytes, %v; want the %d before it, then io.ErrUnexpectedEOF",
					seed, cut, len(b), err, len(whole))
			}
			recs, c, err := decompressRecords(file[:from+cut])
			if n := bytes.Count(whole, []byte("\n")); err != nil || !c.Torn || len(recs) < n {
				t.Fatalf("seed %d: the last member torn after %d bytes: %d records, %+v, %v; want the %d before it and a tear",
					seed, cut, len(recs), c, err, n)
			}
		}
	}
}

// decompressAll reads data as Decompress and io.ReadAll do.
func decompressAll(data []byte) ([]byte, error) {
	r, err := Decompress(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// decompressRecords reads data as Decompress and ReadRecords do.
func decompressRecords(data []byte) ([]Record, Cut, error) {
	r, err := Decompress(bytes.NewReader(data))
	if err != nil {
		return nil, Cut{}, err
	}
	return ReadRecords(r, "x")
}

// A line that is not a record is reported as the line, with no gzip
// member blamed, unless the member it came from breaks: the scanner reads
// ahead into the next member, which breaking is no fault of the line's;
// and the member the line came from is read on only so far (a whole file
// of one member is not decompressed to say that its third line is bad).
func TestReadRecordsBadLineBlamesItsOwnMember(t *testing.T) {
	// A bad line in member 1, whole; member 2 torn mid-file.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	fmt.Fprintf(zw, "%s\n{\"schema\": nope}\n%s\n", dynamoRow("a", "", 1), dynamoRow("b", "", 2))
	zw.Close()
	from := buf.Len()
	file, _, starts := randomMembers(rand.New(rand.NewPCG(1, 1)), 2)
	buf.Write(file[:starts[1]/2])
	buf.Write(file[starts[1]:])
	r, err := Decompress(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(r); !errors.As(err, new(*MemberError)) {
		t.Fatalf("member 2 torn: read %d bytes, %v; want a MemberError, for the test to mean anything", len(b), err)
	}
	r, _ = Decompress(bytes.NewReader(buf.Bytes()))
	_, _, err = ReadRecords(r, "x")
	var se *json.SyntaxError
	if err == nil || !strings.HasPrefix(err.Error(), "line 2: ") || !errors.As(err, &se) || errors.As(err, new(*MemberError)) {
		t.Errorf("a bad line 2 in member 1, whole, with member 2 (at byte %d) torn: %v; want line 2's syntax error, no member's", from, err)
	}

	// One member of 8 MiB, line 3 bad.
	var content bytes.Buffer
	fmt.Fprintf(&content, "%s\n%s\n{\"schema\": nope}\n", dynamoRow("a", "", 1), dynamoRow("b", "", 2))
	for i := 0; content.Len() < 8<<20; i++ {
		fmt.Fprintf(&content, "%s\n", dynamoRow(fmt.Sprint(i), "", uint64(i)))
	}
	buf.Reset()
	zw.Reset(&buf)
	zw.Write(content.Bytes())
	zw.Close()
	in := &readCounter{r: bytes.NewReader(buf.Bytes())}
	r, _ = Decompress(in)
	_, _, err = ReadRecords(r, "x")
	if err == nil || !strings.HasPrefix(err.Error(), "line 3: ") || !errors.As(err, &se) || errors.As(err, new(*MemberError)) {
		t.Errorf("one whole member, line 3 bad: %v; want line 3's syntax error", err)
	}
	if in.n > int64(buf.Len())/2 {
		t.Errorf("one member of %d bytes (%d compressed), line 3 bad: read %d bytes of it to say so", content.Len(), buf.Len(), in.n)
	}
}

// A member torn mid-file whose decoder would run on past finishMember's
// budget is still what broke, once its decoder has taken in another
// member's header as its own data.
func TestFinishMemberPastItsBudget(t *testing.T) {
	file, _, starts := randomMembers(rand.New(rand.NewPCG(2, 2)), 3)
	from, to := starts[1], starts[2]
	found := 0
	for cut := 10; cut < to-from; cut++ {
		data := append(append([]byte(nil), file[:from+cut]...), file[to:]...)
		r, err := Decompress(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		g := r.(*gzipReader)
		var b [1]byte
		for !g.in.seen {
			if _, err := g.Read(b[:]); err != nil {
				break
			}
		}
		if !g.in.seen || g.err != nil || g.member != 2 {
			continue // the decoder noticed first
		}
		found++
		me := g.finishMember(0)
		if me == nil || me.Member != 2 || me.Offset != int64(from) || !me.More ||
			!strings.Contains(me.Error(), fmt.Sprintf("runs on into a member header, at byte %d", from+cut)) {
			t.Fatalf("member 2 torn after %d bytes, member 3 at byte %d taken in: %v; want a MemberError for member 2 saying where", cut, from+cut, me)
		}
	}
	if found == 0 {
		t.Fatal("no tear whose decoder took in the next member's header unnoticed: the test tests nothing")
	}
}

type readCounter struct {
	r io.Reader
	n int64
}

func (c *readCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A stream that breaks past its first member names the member for every
// importer, not only the recorder's: bytes after a whole member that start
// none, and a member whose checksum is wrong with nothing after it.
func TestDecompressNamesTheBrokenMember(t *testing.T) {
	file, starts := gzipMembers(2, 3)
	bad := append(append([]byte(nil), file...), "not gzip at all"...)
	sum := append([]byte(nil), file...)
	sum[len(sum)-6] ^= 0xff // the last member's CRC
	for _, tc := range []struct {
		name string
		data []byte
		want MemberError
	}{
		{"garbage after the members", bad, MemberError{Member: 3, Offset: int64(starts[2]), More: true, Err: gzip.ErrHeader}},
		{"the last member's checksum wrong", sum, MemberError{Member: 2, Offset: int64(starts[1]), Err: gzip.ErrChecksum}},
	} {
		r, err := Decompress(bytes.NewReader(tc.data))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(r)
		var me *MemberError
		if !errors.As(err, &me) || *me != tc.want {
			t.Errorf("%s: %v, want %+v", tc.name, err, tc.want)
		}
	}
	// Whole, the members read as one stream.
	r, err := Decompress(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(r); err != nil || bytes.Count(b, []byte("\n")) != 6 {
		t.Errorf("whole: %d lines, %v", bytes.Count(b, []byte("\n")), err)
	}
}

// FuzzDecompress: the member reader reads what compress/gzip reads, and
// breaks where it breaks, only saying where. And a recorder's file of
// three members whose lines are the input's bytes, in JSON, at any level,
// breaks as TestReadRecordsGzipTornMidFile says, wherever it is torn: the
// second member torn, the third after it, is a MemberError naming the
// second; the third torn is a tear at the end, unless the bytes before the
// tear hold a member header by chance (gzipReader's countingReader).
func FuzzDecompress(f *testing.F) {
	file, starts := gzipMembers(3, 2)
	f.Add(file, uint16(30), uint8(0))
	f.Add(append(append([]byte(nil), file[:starts[1]+30]...), file[starts[2]:]...), uint16(9), uint8(2))
	f.Add(file[:len(file)-5], uint16(1), uint8(1))
	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, b []byte, cut uint16, level uint8) {
	if len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b {
		want, werr := gunzip(b)
		got, err := decompressAll(b)
		if (err == nil) != (werr == nil) || werr != nil && !errors.Is(err, werr) {
			t.Fatalf("error %v, compress/gzip's %v", err, werr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes, compress/gzip %d", len(got), len(want))
		}
	}

	// The input's bytes as three members' lines, at level -2 … 9.
	var contents [][]byte
	for part := range 3 {
		var c bytes.Buffer
		chunk := b[part*len(b)/3 : (part+1)*len(b)/3]
		for len(chunk) > 0 || c.Len() == 0 {
			n := min(len(chunk), 1+int(cut)%37)
			line, _ := json.Marshal(map[string]string{"x": string(chunk[:n])})
			c.Write(line)
			c.WriteByte('\n')
			chunk = chunk[n:]
		}
		contents = append(contents, c.Bytes())
	}
	var rec bytes.Buffer
	var starts []int
	lvl := int(level%12) - 2
	writers.Lock()
	defer writers.Unlock()
	zw := writers.by[lvl+2]
	if zw == nil {
		zw, _ = gzip.NewWriterLevel(nil, lvl)
		writers.by[lvl+2] = zw
	}
	for _, c := range contents {
		starts = append(starts, rec.Len())
		zw.Reset(&rec)
		zw.Write(c)
		zw.Close()
	}
	starts = append(starts, rec.Len())
	file := rec.Bytes()

	// The second torn mid-file.
	from, to := starts[1], starts[2]
	at := 1 + int(cut)%(to-from-1)
	data := append(append([]byte(nil), file[:from+at]...), file[to:]...)
	whole := contents[0]
	got, err := decompressAll(data)
	var me *MemberError
	if !errors.As(err, &me) || me.Member != 2 || me.Offset != int64(from) || !me.More || !bytes.HasPrefix(got, whole) {
		t.Fatalf("member 2 torn after %d of its %d bytes: read %d bytes, %v; want the %d before it, then a MemberError for member 2 at byte %d",
			at, to-from, len(got), err, len(whole), from)
	}
	if _, _, err := decompressRecords(data); !errors.As(err, &me) || me.Member != 2 || me.Offset != int64(from) || !me.More {
		t.Fatalf("member 2 torn after %d of its %d bytes: %v; want a MemberError for member 2 at byte %d", at, to-from, err, from)
	}

	// The third torn: the end.
	from = starts[2]
	at = 1 + int(cut)%(len(file)-from-1)
	data = file[:from+at]
	whole = bytes.Join(contents[:2], nil)
	got, err = decompressAll(data)
	if holdsHeader(data[from+1:]) {
		if !errors.As(err, &me) || me.Member != 3 || !me.More {
			t.Fatalf("member 3 torn after %d bytes, a member header in them: %v; want a MemberError for member 3", at, err)
		}
		return
	}
	if err != io.ErrUnexpectedEOF || !bytes.HasPrefix(got, whole) {
		t.Fatalf("member 3 torn after %d of its %d bytes: read %d bytes, %v; want the %d before it, then io.ErrUnexpectedEOF",
			at, len(file)-from, len(got), err, len(whole))
	}
}

// writers are FuzzDecompress's gzip writers, by level (-2 … 9), kept: a
// new one costs more than the rest of a run (and a sync.Pool drops them at
// every GC).
var writers struct {
	sync.Mutex
	by [12]*gzip.Writer
}

// holdsHeader is countingReader's test, spelled out: whether b holds the
// 10 bytes of a gzip member header.
func holdsHeader(b []byte) bool {
	for i := 0; i+10 <= len(b); i++ {
		h := b[i : i+10]
		if h[0] == 0x1f && h[1] == 0x8b && h[2] == 8 && h[3]&0xe0 == 0 && (h[8] == 0 || h[8] == 2 || h[8] == 4) && (h[9] < 32 || h[9] == 255) {
			return true
		}
	}
	return false
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
