package turns

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/routing"
)

func TestSessionKeyRoundTrip(t *testing.T) {
	for _, k := range [][2]string{{"t", "s"}, {"", "s"}, {"a/b", "c\x01d"}} {
		got := SplitSessionKey(SessionKey(admissionKey(k[0], k[1])))
		if got.Tenant != k[0] || got.SessionID != k[1] {
			t.Fatalf("%q → %+v", k, got)
		}
	}
	if SessionKey(admissionKey("t", "")) != "" {
		t.Fatal("no session must stay empty")
	}
}

func TestEnginePriority(t *testing.T) {
	for _, c := range []struct {
		jump float64
		want int32
	}{
		{0, 0}, {1, -1}, {-2, 2}, {-1, 1}, {0.4, 0}, {0.6, -1}, {-2.5, 3},
		{math.Inf(1), -1 << 20}, {math.Inf(-1), 1 << 20}, {math.NaN(), 0}, {1e12, -1 << 20},
	} {
		if got := EnginePriority(c.jump); got != c.want {
			t.Errorf("EnginePriority(%v) = %d, want %d", c.jump, got, c.want)
		}
	}
}

func admissionKey(tenant, session string) admission.Key {
	return admission.Key{Tenant: tenant, SessionID: session}
}

var t0 = time.Unix(1_700_000_000, 0)

// newPipeline is a pipeline of the given policy, with admission control,
// over workers a, b and c of ample capacity.
func newPipeline(t *testing.T, policy routing.Policy) (*Pipeline, []routing.Candidate) {
	t.Helper()
	rc := routing.DefaultConfig()
	rc.Policy = policy
	ac := admission.DefaultConfig()
	p, err := New(Config{Routing: rc, Admission: &ac, Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	var cands []routing.Candidate
	for _, w := range []string{"a", "b", "c"} {
		p.SetWorker(w, []int64{1 << 20}, 0)
		cands = append(cands, routing.Candidate{Worker: w})
	}
	return p, cands
}

// TestPlaceNeverChoosesExcluded: under every policy, with and without a
// session, a turn never lands on a worker it excludes.
func TestPlaceNeverChoosesExcluded(t *testing.T) {
	excludes := [][]string{{"a"}, {"b"}, {"c"}, {"a", "b"}, {"b", "c"}, {"a", "c"}, {"a", "zz"}}
	for _, policy := range []routing.Policy{routing.PolicyRoundRobin, routing.PolicyLeastLoaded, routing.PolicyKV,
		routing.PolicyKVAffinity, routing.PolicySessionAware} {
		for _, session := range []string{"", "s"} {
			t.Run(fmt.Sprintf("%s/session=%q", policy, session), func(t *testing.T) {
				p, cands := newPipeline(t, policy)
				key := admissionKey("t", session)
				for i := range 70 {
					ex := excludes[i%len(excludes)]
					turn := Turn{RequestID: fmt.Sprint("r", i), Key: key, PromptTokens: 64, BlockSize: 16, Exclude: ex}
					now := t0.Add(time.Duration(i) * time.Second)
					pl, err := p.Place(now, turn, p.Admit(now, turn, nil), cands)
					if err != nil {
						t.Fatal(err)
					}
					if slices.Contains(ex, pl.Worker) {
						t.Fatalf("turn %d excluding %v placed on %s (%s)", i, ex, pl.Worker, pl.Reason)
					}
					p.Finish(now, turn.RequestID, Ended{PromptTokens: 64, CompletionTokens: 8})
				}
			})
		}
	}
}

// TestPlaceMigratesPinnedProgram is the frontend's migration as the
// pipeline sees it: a program placed on a worker, a turn whose attempt
// there failed (finished with nothing generated) and which routes again
// excluding it. Admission pins the program to its worker; the pin does not
// hold, the cost function chooses among the others, and the program moves.
func TestPlaceMigratesPinnedProgram(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicySessionAware)
	key := admissionKey("t", "s")
	turn := Turn{RequestID: "r1", Key: key, PromptTokens: 64, BlockSize: 16}
	pl, err := p.Place(t0, turn, p.Admit(t0, turn, nil), cands)
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(t0, "r1", Ended{PromptTokens: 64, CompletionTokens: 8})
	from := pl.Worker

	// The next turn is pinned to the program's worker, fails there before
	// its first token and comes back excluding it.
	turn = Turn{RequestID: "r2", Key: key, PromptTokens: 96, BlockSize: 16}
	now := t0.Add(time.Second)
	if adm := p.Admit(now, turn, nil); adm.Worker != from {
		t.Fatalf("admission pins %q, want the program's worker %q", adm.Worker, from)
	}
	if pl, err = p.Place(now, turn, admission.Admission{Verdict: admission.Run, Worker: from}, cands); err != nil || pl.Worker != from {
		t.Fatalf("first attempt on %q (%v), want %q", pl.Worker, err, from)
	}
	p.Finish(now, "r2", Ended{PromptTokens: 96})

	turn.Exclude = []string{from}
	now = now.Add(time.Millisecond)
	adm := p.Admit(now, turn, nil)
	if adm.Worker != from {
		t.Fatalf("admission pins %q, want %q", adm.Worker, from)
	}
	pl, err = p.Place(now, turn, adm, cands)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Worker == from || pl.Reason == routing.ReasonPinned {
		t.Fatalf("migrated turn placed on %q (%s), want another worker by cost", pl.Worker, pl.Reason)
	}
	if prog, _ := p.Controller().Get(key); prog.Worker != pl.Worker {
		t.Errorf("program on %q, want it moved to %q", prog.Worker, pl.Worker)
	}
	if !slices.ContainsFunc(pl.Events, func(e admission.Event) bool { return e.Reason == admission.ReasonPlaced }) {
		t.Errorf("no placed event in %+v", pl.Events)
	}
	if got := p.Router().Load().Worker(from).Requests; got != 0 {
		t.Errorf("failed worker still holds %d requests", got)
	}
	if got := p.Router().Load().Worker(pl.Worker).Requests; got != 1 {
		t.Errorf("new worker holds %d requests, want 1", got)
	}
}

// TestPlaceAllExcluded: a turn that excludes every candidate is not placed
// (ErrEveryWorkerExcluded, which the scheduler answers FAILED_PRECONDITION)
// and its program gets its turn back.
func TestPlaceAllExcluded(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicySessionAware)
	key := admissionKey("t", "s")
	turn := Turn{RequestID: "r1", Key: key, PromptTokens: 64, BlockSize: 16, Exclude: []string{"c", "b", "a"}}
	adm := p.Admit(t0, turn, nil)
	if adm.Verdict != admission.Run {
		t.Fatalf("verdict %v", adm.Verdict)
	}
	if _, err := p.Place(t0, turn, adm, cands); !errors.Is(err, ErrEveryWorkerExcluded) {
		t.Fatalf("err = %v, want ErrEveryWorkerExcluded", err)
	}
	if prog, ok := p.Controller().Get(key); !ok || prog.InFlight != 0 {
		t.Errorf("program %+v: its turn was not handed back", prog)
	}
	if _, ok := p.Router().Load().RequestWorker("r1"); ok {
		t.Error("the unplaced turn holds load")
	}
}

// TestAbortCancelsTheTurn: a finish aborted before any output frees the
// router's load and cancels the program's turn (no step), where a finish
// counts one.
func TestAbortCancelsTheTurn(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicySessionAware)
	k := admissionKey("t", "s")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, end := range []func(id string) (bool, []admission.Event){
		func(id string) (bool, []admission.Event) {
			_, known, evs := p.Finish(now, id, Ended{PromptTokens: 1_000, Aborted: true})
			return known, evs
		},
		func(id string) (bool, []admission.Event) {
			_, known, evs := p.Finish(now, id, Ended{PromptTokens: 1_000, CompletionTokens: 10})
			return known, evs
		},
	} {
		turn := Turn{RequestID: fmt.Sprintf("r%d", i), Key: k, PromptTokens: 1_000, Blocks: 62, BlockSize: 16}
		a := p.Admit(now, turn, nil)
		if _, err := p.Place(now, turn, a, cands); err != nil {
			t.Fatal(err)
		}
		if known, _ := end(turn.RequestID); !known {
			t.Fatalf("turn %d unknown to the router", i)
		}
		if n := p.Router().Load().Len(); n != 0 {
			t.Fatalf("turn %d: %d requests still loaded", i, n)
		}
		prog, _ := p.Controller().Get(k)
		if prog.StepCount != i {
			t.Fatalf("after turn %d: %d steps, want %d", i, prog.StepCount, i)
		}
	}
}

// A turn whose worker left the fleet still ends when its finish comes: a
// final one releases its program (the router had forgotten it, and the
// program stayed in flight for good).
func TestTurnOfARemovedWorkerStillEnds(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicySessionAware)
	k := admissionKey("t", "s")
	turn := Turn{RequestID: "r1", Key: k, PromptTokens: 1_000, Blocks: 62, BlockSize: 16, Final: true}
	pl, err := p.Place(t0, turn, p.Admit(t0, turn, nil), cands)
	if err != nil {
		t.Fatal(err)
	}
	p.RemoveWorker(t0, pl.Decision.Worker)
	_, known, evs := p.Finish(t0, "r1", Ended{PromptTokens: 1_000, CompletionTokens: 10})
	if prog, _ := p.Controller().Get(k); !known || prog.Lifecycle != admission.Terminated || len(evs) != 1 {
		t.Fatalf("finish after the worker left: known %v, %v, events %+v", known, prog.Lifecycle, evs)
	}
}

// A request placed again before the finish of its last attempt came (that
// finish was lost) ends the attempt: one turn in flight, not two, and its
// finish leaves the program ACTING.
func TestPlacedAgainSupersedesTheLostAttempt(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicySessionAware)
	k := admissionKey("t", "s")
	turn := Turn{RequestID: "r1", Key: k, PromptTokens: 1_000, Blocks: 62, BlockSize: 16}
	for range 2 {
		if _, err := p.Place(t0, turn, p.Admit(t0, turn, nil), cands); err != nil {
			t.Fatal(err)
		}
	}
	if prog, _ := p.Controller().Get(k); prog.InFlight != 1 || p.Router().Load().Len() != 1 {
		t.Fatalf("placed twice: %d turns in flight, %d requests", prog.InFlight, p.Router().Load().Len())
	}
	p.Finish(t0, "r1", Ended{PromptTokens: 1_000, CompletionTokens: 10})
	if prog, _ := p.Controller().Get(k); prog.InFlight != 0 || prog.Phase != admission.Acting {
		t.Fatalf("after the finish: %d in flight, %v", prog.InFlight, prog.Phase)
	}
}

// An aborted attempt that another follows (a migration) keeps a session
// ending with it; one that none follows ends it.
func TestSupersededFinalAttemptKeepsTheSession(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicySessionAware)
	k := admissionKey("t", "s")
	for i, superseded := range []bool{true, false} {
		turn := Turn{RequestID: fmt.Sprintf("r%d", i), Key: k, PromptTokens: 1_000, Blocks: 62, BlockSize: 16, Final: true}
		if _, err := p.Place(t0, turn, p.Admit(t0, turn, nil), cands); err != nil {
			t.Fatal(err)
		}
		p.Finish(t0, turn.RequestID, Ended{PromptTokens: 1_000, Aborted: true, Superseded: superseded})
		prog, _ := p.Controller().Get(k)
		if want := map[bool]admission.Lifecycle{true: admission.Active, false: admission.Terminated}[superseded]; prog.Lifecycle != want {
			t.Fatalf("aborted final attempt, superseded %v: %v, want %v", superseded, prog.Lifecycle, want)
		}
	}
}

// Sharing a worker among replicas shrinks admission's capacity of it; when
// the others leave (one replica again) it is whole again, and a worker
// that left is not brought back by the next share.
func TestShareIsUndoneWhenTheOthersLeave(t *testing.T) {
	p, _ := newPipeline(t, routing.PolicySessionAware)
	capOf := func(w string) (int64, bool) {
		for _, u := range p.Controller().Utilization(t0) {
			if u.Worker == w {
				return u.Capacity.Tokens, true
			}
		}
		return 0, false
	}
	whole, _ := capOf("a")
	busy := func(string) admission.Use { return admission.Use{Tokens: float64(whole) / 2, Users: 1} }
	p.Share(busy, 3, 0)
	if got, _ := capOf("a"); got >= whole {
		t.Fatalf("shared among 3 with half used by others: capacity %d, whole %d", got, whole)
	}
	p.Share(busy, 1, 0)
	if got, _ := capOf("a"); got != whole {
		t.Fatalf("alone again: capacity %d, want the whole %d", got, whole)
	}
	p.RemoveWorker(t0, "b")
	p.Share(busy, 3, 0)
	if _, ok := capOf("b"); ok {
		t.Fatal("a removed worker came back with the next share")
	}
}

// A continued turn of a session the pipeline has never routed is
// inherited (placed where its prefix is); one it routed before is its own.
func TestContinuedTurnOfAnUnknownSessionIsInherited(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicyKVAffinity)
	cands[1].Overlap = routing.Overlap{Device: 3}
	place := func(id, session string, continued bool) routing.Decision {
		t.Helper()
		tr := Turn{RequestID: id, Key: admissionKey("t", session), PromptTokens: 160, Blocks: 10, BlockSize: 16, Continued: continued}
		pl, err := p.Place(t0, tr, admission.Admission{}, cands)
		if err != nil {
			t.Fatal(err)
		}
		return pl.Decision
	}
	if d := place("1", "inherited", true); d.Reason != routing.ReasonInherited || d.Worker != "b" {
		t.Fatalf("continued, unknown: %s on %s", d.Reason, d.Worker)
	}
	if d := place("2", "own", false); d.Reason == routing.ReasonInherited {
		t.Fatal("a first turn counted as inherited")
	}
	if d := place("3", "own", true); d.Reason == routing.ReasonInherited {
		t.Fatal("a session this pipeline routed counted as inherited")
	}
}

// TestHoldingsAskAboutIdlePrograms: with HeldFromIndex the pipeline asks
// about each placed program in a tool call, by its latest prompt's tip,
// and not about one whose turn is running, whose session ended, or whose
// tip is unknown; without it, about none.
func TestHoldingsAskAboutIdlePrograms(t *testing.T) {
	rc := routing.DefaultConfig()
	rc.Policy = routing.PolicySessionAware
	for _, fromIndex := range []bool{false, true} {
		ac := admission.DefaultConfig()
		ac.HeldFromIndex = fromIndex
		p, err := New(Config{Routing: rc, Admission: &ac, Rand: rand.New(rand.NewPCG(1, 2))})
		if err != nil {
			t.Fatal(err)
		}
		p.SetWorker("a", []int64{1 << 20}, 0)
		cands := []routing.Candidate{{Worker: "a"}}
		run := func(id, session string, tip uint64, final bool) {
			var hashes []kv.BlockHash
			if tip != 0 {
				hashes = []kv.BlockHash{kv.BlockHash(tip - 3), kv.BlockHash(tip - 2), kv.BlockHash(tip - 1), kv.BlockHash(tip)}
			}
			turn := Turn{RequestID: id, Key: admissionKey("t", session), PromptTokens: 64, Blocks: 4, BlockSize: 16,
				Anchors: Anchors(hashes), Final: final}
			if _, err := p.Place(t0, turn, p.Admit(t0, turn, nil), cands); err != nil {
				t.Fatal(err)
			}
		}
		run("i1", "idle", 11, false)
		p.Finish(t0, "i1", Ended{PromptTokens: 64, CompletionTokens: 8})
		run("b1", "busy", 22, false) // still generating
		run("n1", "notip", 0, false)
		p.Finish(t0, "n1", Ended{PromptTokens: 64, CompletionTokens: 8})
		run("e1", "ended", 33, false)
		p.Finish(t0, "e1", Ended{PromptTokens: 64, CompletionTokens: 8})
		p.EndSession(t0, admissionKey("t", "ended"))

		qs := p.Holdings()
		if !fromIndex {
			if len(qs) != 0 {
				t.Fatalf("asked %+v without HeldFromIndex", qs)
			}
			continue
		}
		want := HoldingQuery{Key: admissionKey("t", "idle"), Worker: "a", Since: t0, Blocks: 4, BlockSize: 16,
			Anchors: []Anchor{{3, 11}, {2, 10}, {1, 9}, {0, 8}}}
		if len(qs) != 1 || !reflect.DeepEqual(qs[0], want) {
			t.Fatalf("queries %+v, want only %+v", qs, want)
		}
		for name, a := range map[string]HoldingAnswer{
			"a stale worker":                    {ChainBlocks: 4, Stale: true},
			"a chain of another length":         {ChainBlocks: 5, Overlap: routing.Overlap{Device: 1}},
			"a chain not ending at its anchor":  {Anchor: 1, ChainBlocks: 4, Overlap: routing.Overlap{Device: 1}},
			"an anchor the query does not have": {Anchor: 7, ChainBlocks: 4},
			"an overlap longer than the chain":  {ChainBlocks: 4, Overlap: routing.Overlap{Device: 3, HostExt: 2}},
			"no chain known, before any was":    {},
		} {
			if p.Held(qs[0], a) {
				t.Fatalf("%s: taken", name)
			}
		}
		if prog, _ := p.Controller().Get(want.Key); prog.HeldSeen {
			t.Fatal("an answer that cannot say was recorded")
		}
		for _, c := range []struct {
			a    HoldingAnswer
			want int64
		}{
			{HoldingAnswer{ChainBlocks: 4, Overlap: routing.Overlap{Device: 1}}, 16},
			{HoldingAnswer{Anchor: 2, ChainBlocks: 2, Overlap: routing.Overlap{Device: 2}}, 32}, // the tail evicted
			// After an answer that knew it, not even the first block: evicted
			// (an overlap beside no chain is noise).
			{HoldingAnswer{Overlap: routing.Overlap{Device: 2}}, 0},
		} {
			if !p.Held(qs[0], c.a) {
				t.Fatalf("%+v was not taken", c.a)
			}
			if prog, _ := p.Controller().Get(want.Key); !prog.HeldSeen || prog.Held != c.want {
				t.Fatalf("%+v: program holds %d (seen %v), want %d", c.a, prog.Held, prog.HeldSeen, c.want)
			}
		}
		// Without the first block among its anchors an unknown chain says
		// nothing, whatever came before.
		noFirst := qs[0]
		noFirst.Anchors = noFirst.Anchors[:len(noFirst.Anchors)-1]
		if p.Held(noFirst, HoldingAnswer{}) {
			t.Fatal("an unknown chain without the first block asked was taken")
		}
	}
}

func TestAnchors(t *testing.T) {
	hashes := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(1000 + i)
		}
		return out
	}
	if Anchors(hashes(0)) != nil {
		t.Fatal("no blocks, yet anchors")
	}
	if got := Anchors(hashes(1)); len(got) != 1 || got[0] != (Anchor{0, 1000}) {
		t.Fatalf("one block: %v", got)
	}
	for _, n := range []int{2, 17, 40, 1000, 6250} {
		got := Anchors(hashes(n))
		if got[0].Pos != n-1 || got[len(got)-1].Pos != 0 || len(got) > anchorSpacing+2 {
			t.Fatalf("%d blocks: %v", n, got)
		}
		for i, a := range got {
			if a.Hash != kv.BlockHash(1000+a.Pos) {
				t.Fatalf("%d blocks: anchor %v names another block", n, a)
			}
			// Deepest first, and no gap wider than a sixteenth of the prompt
			// (rounded up).
			if i > 0 && (a.Pos >= got[i-1].Pos || got[i-1].Pos-a.Pos > (n+anchorSpacing-1)/anchorSpacing) {
				t.Fatalf("%d blocks: anchors %v", n, got)
			}
		}
	}
}

// A pipeline given versions shares as one given none (whole passes): the
// others' uses changing under a new version, the base changing under the
// same one, and three replicas, then one, then three again.
func TestShareVersionsFollowOthersAndBase(t *testing.T) {
	kept, _ := newPipeline(t, routing.PolicySessionAware)
	fresh, _ := newPipeline(t, routing.PolicySessionAware)
	caps := func(p *Pipeline) map[string]admission.Capacity {
		out := map[string]admission.Capacity{}
		for _, u := range p.Controller().Utilization(t0) {
			out[u.Worker] = u.Capacity
		}
		return out
	}
	// share gives both the same others and replicas, kept its version.
	share := func(tag string, others func(string) admission.Use, replicas int, version uint64) {
		t.Helper()
		kept.Share(others, replicas, version)
		fresh.Share(others, replicas, 0)
		a, b := caps(kept), caps(fresh)
		if len(a) != len(b) {
			t.Fatalf("%s: %v vs %v", tag, a, b)
		}
		for w := range a {
			if a[w] != b[w] {
				t.Fatalf("%s: %s kept %+v, fresh %+v", tag, w, a[w], b[w])
			}
		}
	}
	idle := func(string) admission.Use { return admission.Use{} }
	busy := func(string) admission.Use { return admission.Use{Tokens: 1 << 19, Users: 1} }
	share("first", idle, 3, 1)
	share("others changed", busy, 3, 2)
	for _, p := range []*Pipeline{kept, fresh} {
		p.SetWorker("a", []int64{1 << 18}, 4)
	}
	share("base changed", busy, 3, 2)
	share("alone", busy, 1, 2)
	share("shared again", busy, 3, 2)
}

// fullWorker is a session_aware pipeline whose one worker, "a", is held by
// the final turn first (8,000 of its 10,000 tokens), so that a new
// program's first turn waits for room; without the cold lane, it waits
// rather than running cold beside the program.
func fullWorker(t *testing.T) (*Pipeline, Turn, admission.Config) {
	t.Helper()
	rc := routing.DefaultConfig()
	rc.Policy = routing.PolicySessionAware
	ac := admission.DefaultConfig()
	ac.ColdLane = 0
	p, err := New(Config{Routing: rc, Admission: &ac, Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	p.SetWorker("a", []int64{10_000}, 0)
	first := Turn{RequestID: "r1", Key: admissionKey("t", "first"), PromptTokens: 8_000, Blocks: 500, BlockSize: 16, Final: true}
	if _, err := p.Place(t0, first, p.Admit(t0, first, nil), []routing.Candidate{{Worker: "a"}}); err != nil {
		t.Fatal(err)
	}
	return p, first, ac
}

// A new program's first turn that waited for room, was woken by the tick
// that resumed the program, and whose caller gave up before it came back
// for the room (Abandon after the wake) leaves no program behind: resumed,
// reasoning and with nothing in flight, it would otherwise hold its tokens
// on its worker for good (the idle TTL releases only ACTING programs).
func TestAbandonedAfterTheWakeReleasesANewProgram(t *testing.T) {
	p, _, ac := fullWorker(t)
	// No room for a second program: its first turn waits.
	late := Turn{RequestID: "r2", Key: admissionKey("t", "late"), PromptTokens: 8_000, Blocks: 500, BlockSize: 16}
	a := p.Admit(t0, late, nil)
	if a.Verdict != admission.Wait {
		t.Fatalf("second program: %v, want wait", a.Verdict)
	}
	// The first session ends; the tick resumes the waiting program and
	// wakes its turn, whose caller has just left.
	p.Finish(t0, "r1", Ended{PromptTokens: 8_000, CompletionTokens: 10})
	now := t0.Add(time.Second)
	p.Tick(now)
	select {
	case <-a.Waiter.Ready():
	default:
		t.Fatal("the tick did not wake the waiting turn")
	}
	p.Abandon(now, a.Waiter, true)
	now = now.Add(ac.IdleTTL + time.Minute)
	p.Tick(now)
	if prog, ok := p.Controller().Get(late.Key); ok && prog.Lifecycle != admission.Terminated {
		t.Fatalf("abandoned program is still %v %v with %d in flight, holding %d tokens on %q",
			prog.Lifecycle, prog.Phase, prog.InFlight, prog.TokenTotal, prog.Worker)
	}
}

// TestAbandonedBesideAWokenSiblingKeepsTheProgram: two first turns of one
// new program wait and are woken together; the first's caller leaves before
// the second comes back. The program must stay the second's (its place and
// sequence), not be released under it and admitted anew.
func TestAbandonedBesideAWokenSiblingKeepsTheProgram(t *testing.T) {
	p, _, _ := fullWorker(t)
	one := Turn{RequestID: "r2", Key: admissionKey("t", "late"), PromptTokens: 8_000, Blocks: 500, BlockSize: 16}
	two := one
	two.RequestID = "r3"
	a1, a2 := p.Admit(t0, one, nil), p.Admit(t0, two, nil)
	if a1.Verdict != admission.Wait || a2.Verdict != admission.Wait {
		t.Fatalf("verdicts %v %v, want both to wait", a1.Verdict, a2.Verdict)
	}
	before, _ := p.Controller().Get(one.Key)
	p.Finish(t0, "r1", Ended{PromptTokens: 8_000, CompletionTokens: 10})
	now := t0.Add(time.Second)
	p.Tick(now)
	for _, w := range []*admission.Waiter{a1.Waiter, a2.Waiter} {
		select {
		case <-w.Ready():
		default:
			t.Fatal("the tick did not wake both turns")
		}
	}
	for _, e := range p.Abandon(now, a1.Waiter, true) {
		if e.Program.Lifecycle == admission.Terminated {
			t.Fatalf("the program was released with a woken turn still to come back: %+v", e)
		}
	}
	if a := p.Admit(now, two, a2.Waiter); a.Verdict != admission.Run {
		t.Fatalf("the woken sibling: %v, want run", a.Verdict)
	}
	if after, _ := p.Controller().Get(two.Key); after.Seq != before.Seq {
		t.Fatalf("the sibling runs as program %d, admitted anew; want %d", after.Seq, before.Seq)
	}
}

// TestRoutedSessionsForgottenAfterTheirHorizon: a session is remembered at
// least inheritHorizon after it was last routed and at most twice that,
// without a pass over the sessions at each tick; a turn of it after that is
// inherited.
func TestRoutedSessionsForgottenAfterTheirHorizon(t *testing.T) {
	p, cands := newPipeline(t, routing.PolicyKVAffinity)
	cands[1].Overlap = routing.Overlap{Device: 3}
	place := func(at time.Time, id, session string, continued bool) routing.Decision {
		t.Helper()
		tr := Turn{RequestID: id, Key: admissionKey("t", session), PromptTokens: 160, Blocks: 10, BlockSize: 16, Continued: continued}
		pl, err := p.Place(at, tr, admission.Admission{}, cands)
		if err != nil {
			t.Fatal(err)
		}
		p.Finish(at, id, Ended{})
		return pl.Decision
	}
	a := SessionKey(admissionKey("t", "a"))
	place(t0, "1", "a", false)
	p.Tick(t0)
	p.Tick(t0.Add(inheritHorizon - time.Second))
	p.Tick(t0.Add(inheritHorizon))
	if !p.routed.has(a) {
		t.Fatal("forgotten before its horizon")
	}
	at := t0.Add(2 * inheritHorizon)
	p.Tick(at)
	if p.routed.has(a) {
		t.Fatal("remembered past twice its horizon")
	}
	if d := place(at, "2", "a", true); d.Reason != routing.ReasonInherited {
		t.Fatalf("a turn after the horizon: %s, want inherited", d.Reason)
	}
	if !p.routed.has(a) {
		t.Fatal("routed again, not remembered")
	}
}

// TestLoneReplicaForgetsItsPeersDemand: when the replicas drop to one, the
// departed peer's paused programs shed no new session.
func TestLoneReplicaForgetsItsPeersDemand(t *testing.T) {
	p := sessionAware(t, func(ac *admission.Config) { ac.ShedBacklog = 0.4 })
	p.SetWorker("a", []int64{10_000}, 0)
	p.Share(func(string) admission.Use { return admission.Use{Paused: admission.Demand{Tokens: 6_000, Since: t0}} }, 2, 1)
	p.Share(func(string) admission.Use { return admission.Use{} }, 1, 2) // the peer is gone
	if a := p.Admit(t0.Add(time.Minute), Turn{RequestID: "r", Key: admissionKey("t", "fresh"), PromptTokens: 100}, nil); a.Verdict == admission.Shed {
		t.Fatal("one replica, nothing paused: a new session was shed")
	}
}

// TestAbandonedFinalTurnEndsItsRouting: a program released because its
// final turn's client left forgets its session's routing state too, as a
// placed final turn does: no affinity binding, not known as routed.
func TestAbandonedFinalTurnEndsItsRouting(t *testing.T) {
	p := sessionAware(t, func(ac *admission.Config) { ac.ColdLane = 0 })
	p.SetWorker("a", []int64{100_000}, 0)
	cands := []routing.Candidate{{Worker: "a"}}
	run := func(id string, k admission.Key, tokens int) {
		tr := Turn{RequestID: id, Key: k, PromptTokens: tokens}
		if _, err := p.Place(t0, tr, p.Admit(t0, tr, nil), cands); err != nil {
			t.Fatal(err)
		}
		p.Finish(t0, id, Ended{PromptTokens: tokens, CompletionTokens: 10})
	}
	k := admissionKey("t", "s")
	run("r1", k, 3_000)
	for i, s := range []string{"x", "y", "z"} {
		run(fmt.Sprint("o", i), admissionKey("t", s), 4_000)
	}
	p.SetWorker("a", []int64{10_000}, 0)
	p.Tick(t0.Add(time.Second))
	if pr, _ := p.Controller().Get(k); pr.Lifecycle != admission.Paused {
		t.Fatalf("s is %v, not paused: the test would prove nothing", pr.Lifecycle)
	}
	w := p.Admit(t0.Add(2*time.Second), Turn{RequestID: "r2", Key: k, PromptTokens: 3_100, Final: true}, nil)
	if w.Verdict != admission.Wait {
		t.Fatalf("verdict %v, want wait", w.Verdict)
	}
	p.Abandon(t0.Add(3*time.Second), w.Waiter, true)
	pr, _ := p.Controller().Get(k)
	_, bound := p.router.Affinity().Lookup(t0.Add(3*time.Second), SessionKey(k))
	if pr.Lifecycle != admission.Terminated || bound || p.routed.has(SessionKey(k)) {
		t.Errorf("program %v, binding kept %v, routed %v; want it released and its routing forgotten", pr.Lifecycle, bound, p.routed.has(SessionKey(k)))
	}
}

// sessionAware is a session_aware pipeline with admission's defaults as
// mod changes them, and no worker.
func sessionAware(t *testing.T, mod func(*admission.Config)) *Pipeline {
	t.Helper()
	rc := routing.DefaultConfig()
	rc.Policy = routing.PolicySessionAware
	ac := admission.DefaultConfig()
	mod(&ac)
	p, err := New(Config{Routing: rc, Admission: &ac, Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
