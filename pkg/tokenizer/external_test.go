package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestExternalReference runs the differential test for any tokenizer.json
// whose data cannot be committed (e.g. Llama 3, under its community
// license):
//
//	go run ./tokenizer/internal/refgen -out /tmp/in.json
//	node tokenizer/testdata/reference.js llama3.json /tmp/in.json /tmp/llama3_ref.json.gz
//	TOKENIZER_JSON=llama3.json TOKENIZER_REF=/tmp/llama3_ref.json.gz go test ./tokenizer -run External
func TestExternalReference(t *testing.T) {
	jsonPath, refPath := os.Getenv("TOKENIZER_JSON"), os.Getenv("TOKENIZER_REF")
	if jsonPath == "" || refPath == "" {
		t.Skip("opt-in, for a tokenizer.json that cannot be committed: set TOKENIZER_JSON and TOKENIZER_REF (see the comment)")
	}
	f, err := os.Open(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, err := Load(f)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	rf, err := os.Open(refPath)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	zr, err := gzip.NewReader(rf)
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []refCase `json:"cases"`
	}
	if err := json.NewDecoder(zr).Decode(&ref); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for _, c := range ref.Cases {
		wantOrd := c.Ordinary
		if wantOrd == nil {
			wantOrd = c.IDs
		}
		got, gotOrd := tok.Encode(c.Text), tok.EncodeOrdinary(c.Text)
		if !slices.Equal(got, c.IDs) || !slices.Equal(gotOrd, wantOrd) {
			bad++
			if bad <= 10 {
				t.Errorf("%s %q:\n%s\nordinary: %s", c.Name, trunc(c.Text), diffIDs(tok, c.IDs, got), diffIDs(tok, wantOrd, gotOrd))
			}
		}
	}
	t.Logf("%s: %d cases, %d differ", tok.Name(), len(ref.Cases), bad)
}
