package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
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

// An older recorder restarted on the same file wrote on after the member
// its last process tore: the member breaks off in the middle of the file,
// wherever the tear, and the error names the member and where it starts
// rather than a line of the garbage the torn member decodes into, or a
// flate offset within the member. A tear at the end stays a Cut.
func TestReadRecordsGzipTornMidFile(t *testing.T) {
	file, starts := gzipMembers(4, 20)
	torn := 2 // 1-based: the second member
	from, to := starts[torn-1], starts[torn]
	for cut := 1; cut < to-from; cut++ {
		data := append(append([]byte(nil), file[:from+cut]...), file[to:]...)
		r, err := Decompress(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		recs, _, err := ReadRecords(r, "x")
		var me *MemberError
		if !errors.As(err, &me) || me.Member != torn || me.Offset != int64(from) || !me.More {
			t.Fatalf("member %d torn after %d of its %d bytes, then two whole: %d records, %v; want a MemberError for member %d at byte %d",
				torn, cut, to-from, len(recs), err, torn, from)
		}
		if want := fmt.Sprintf("gzip member %d, at byte %d, breaks off mid-file", torn, from); !strings.Contains(err.Error(), want) {
			t.Fatalf("cut after %d bytes: %v, want it to say %q", cut, err, want)
		}
	}
	// Torn at the end: the whole members' records read, the tear a Cut.
	for _, cut := range []int{1, 10, (to - from) / 2, to - from - 1} {
		r, err := Decompress(bytes.NewReader(file[:from+cut]))
		if err != nil {
			t.Fatal(err)
		}
		recs, c, err := ReadRecords(r, "x")
		if err != nil || !c.Torn || len(recs) < 20 {
			t.Errorf("the last member torn after %d bytes: %d records, %+v, %v; want the first member's and a tear", cut, len(recs), c, err)
		}
	}
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
// breaks where it breaks, only saying where.
func FuzzDecompress(f *testing.F) {
	file, starts := gzipMembers(3, 2)
	f.Add(file)
	f.Add(append(append([]byte(nil), file[:starts[1]+30]...), file[starts[2]:]...))
	f.Add(file[:len(file)-5])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			return // not gzip: Decompress hands the bytes on
		}
		want, werr := gunzip(b)
		r, err := Decompress(bytes.NewReader(b))
		var got []byte
		if err == nil {
			got, err = io.ReadAll(r)
		}
		if (err == nil) != (werr == nil) || werr != nil && !errors.Is(err, werr) {
			t.Fatalf("error %v, compress/gzip's %v", err, werr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("read %d bytes, compress/gzip %d", len(got), len(want))
		}
	})
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
