package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReportPrintsFailuresAndSkipsOnly(t *testing.T) {
	events := []event{
		{Action: "start", Package: "p"},
		{Action: "run", Package: "p", Test: "TestOK"},
		{Action: "output", Package: "p", Test: "TestOK", Output: "=== RUN   TestOK\n"},
		{Action: "output", Package: "p", Test: "TestOK", Output: "    a_test.go:1: chatter\n"},
		{Action: "pass", Package: "p", Test: "TestOK"},
		{Action: "output", Package: "p", Test: "TestBad", Output: "=== RUN   TestBad\n"},
		{Action: "output", Package: "p", Test: "TestBad", Output: "    a_test.go:2: broken\n"},
		{Action: "output", Package: "p", Test: "TestBad", Output: "--- FAIL: TestBad (0.00s)\n"},
		{Action: "fail", Package: "p", Test: "TestBad"},
		{Action: "output", Package: "p", Test: "TestData/big", Output: "=== RUN   TestData/big\n"},
		{Action: "output", Package: "p", Test: "TestData/big", Output: "    a_test.go:3: needs the big file\n"},
		{Action: "output", Package: "p", Test: "TestData/big", Output: "    --- SKIP: TestData/big (0.00s)\n"},
		{Action: "skip", Package: "p", Test: "TestData/big"},
		{Action: "output", Package: "p", Test: "TestQuiet", Output: "--- SKIP: TestQuiet (0.00s)\n"},
		{Action: "skip", Package: "p", Test: "TestQuiet"},
		{Action: "output", Package: "p", Output: "PASS\n"},
		{Action: "output", Package: "p", Output: "FAIL\tp\t0.1s\n"},
		{Action: "fail", Package: "p"},
		{Action: "skip", Package: "q"}, // no test files: not a skipped test
	}
	var out strings.Builder
	r := newReport(&out)
	for _, e := range events {
		b, _ := json.Marshal(e)
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		r.add(back)
	}
	r.summary()
	want := "=== RUN   TestBad\n    a_test.go:2: broken\n--- FAIL: TestBad (0.00s)\nFAIL\tp\t0.1s\n" +
		"\ntests: 1 passed, 1 failed, 2 skipped\n" +
		"  SKIP p TestData/big: a_test.go:3: needs the big file\n" +
		"  SKIP p TestQuiet: (no reason given)\n"
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	var skipped strings.Builder
	if err := r.writeSkipped(&skipped); err != nil {
		t.Fatal(err)
	}
	if got := skipped.String(); got != "p\tTestData/big\np\tTestQuiet\n" {
		t.Errorf("skipped list %q", got)
	}
}
