package flashindex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"switchyard.dev/pkg/kv"
)

// fakeClock is the clock the prediction tests pass in.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) tick(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock            { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }
func predicted(ix *Index, q []kv.BlockHash, now time.Time) Matches {
	var m Matches
	ix.FindMatchesWith(&m, q, FindOptions{Predicted: true, Now: now})
	return m
}

func TestPredictionRules(t *testing.T) {
	p := chain(10, 1)
	const ttl = 5 * time.Second
	type step struct {
		worker  string
		ev      *kv.Event     // a real event, or
		predict int           // predict p[:predict] for worker, or
		tick    time.Duration // advance the clock, or
		remove  bool          // RemoveWorker
	}
	ev := func(e kv.Event) *kv.Event { return &e }
	tests := []struct {
		name  string
		steps []step
		want  map[string]WorkerMatch // with predictions
	}{
		{"prediction counts as device holding", []step{{worker: "a", predict: 6}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 6, Predicted: 6}}},
		{"real depth wins when deeper", []step{
			{worker: "a", ev: ev(kv.Event{Kind: kv.Stored, Blocks: p[:8]})},
			{worker: "a", predict: 6}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 8}}},
		{"prediction extends a real prefix", []step{
			{worker: "a", ev: ev(kv.Event{Kind: kv.Stored, Blocks: p[:3]})},
			{worker: "a", predict: 7}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 7, Predicted: 4}}},
		{"host extension shrinks behind a predicted device prefix", []step{
			{worker: "a", ev: ev(kv.Event{Kind: kv.Stored, Blocks: p[:2]})},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Parent: p[1], Blocks: p[2:9]})},
			{worker: "a", predict: 5}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 5, Host: 4, Predicted: 3}}},
		{"expired prediction is ignored", []step{{worker: "a", predict: 6}, {tick: ttl}},
			map[string]WorkerMatch{}},
		{"live until its expiry", []step{{worker: "a", predict: 6}, {tick: ttl - time.Nanosecond}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 6, Predicted: 6}}},
		{"real Stored of the last block replaces it", []step{
			{worker: "a", predict: 6},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Stored, Blocks: p[:6]})},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Removed, Blocks: p[4:6]})}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 4}}},
		{"partial real Stored keeps it", []step{
			{worker: "a", predict: 6},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Stored, Blocks: p[:3]})}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 6, Predicted: 3}}},
		{"real Removed cuts it before the block", []step{
			{worker: "a", predict: 8},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Removed, Blocks: p[5:6]})}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 5, Predicted: 5}}},
		{"host-tier events leave it alone", []step{
			{worker: "a", predict: 8},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Removed, Tier: kv.TierHost, Blocks: p[2:3]})},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Stored, Tier: kv.TierHost, Blocks: p[:8]})}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 8, Host: 0, Predicted: 8}}},
		{"another worker's events leave it alone", []step{
			{worker: "a", predict: 8},
			{worker: "b", ev: ev(kv.Event{Kind: kv.Removed, Blocks: p[2:3]})}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 8, Predicted: 8}}},
		{"Cleared drops it", []step{
			{worker: "a", predict: 8},
			{worker: "a", ev: ev(kv.Event{Kind: kv.Cleared})}},
			map[string]WorkerMatch{}},
		{"RemoveWorker drops it, events or not", []step{
			{worker: "a", predict: 8},
			{worker: "a", remove: true}},
			map[string]WorkerMatch{}},
		{"longest of several predictions", []step{
			{worker: "a", predict: 3}, {worker: "a", predict: 9}, {worker: "a", predict: 5}},
			map[string]WorkerMatch{"a/0": {Worker: "a", Device: 9, Predicted: 9}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			ix := New(Config{})
			for _, s := range tc.steps {
				switch {
				case s.ev != nil:
					if err := ix.Apply(s.worker, 0, *s.ev); err != nil {
						t.Fatal(err)
					}
				case s.predict > 0:
					if err := ix.Predict(clk.now(), s.worker, 0, 0, p[:s.predict], ttl); err != nil {
						t.Fatal(err)
					}
				case s.remove:
					ix.RemoveWorker(s.worker)
				default:
					clk.tick(s.tick)
				}
			}
			if got := byWorker(predicted(ix, p, clk.now())); !equalMatches(got, tc.want) {
				t.Fatalf("with predictions: got %+v, want %+v", got, tc.want)
			}
			// Without the option, only real entries count.
			for _, w := range ix.FindMatches(p).Workers {
				if w.Predicted != 0 {
					t.Fatalf("plain lookup counted a prediction: %+v", w)
				}
			}
		})
	}
}

func equalMatches(a, b map[string]WorkerMatch) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestPredictRejects(t *testing.T) {
	p := chain(4, 1)
	clk := newFakeClock()
	ix := New(Config{MaxPredictedBlocks: 3})
	for _, tc := range []struct {
		name   string
		blocks []kv.BlockHash
		ttl    time.Duration
	}{
		{"empty", nil, time.Second},
		{"zero ttl", p[:2], 0},
		{"zero hash", []kv.BlockHash{p[0], 0}, time.Second},
		{"over the cap", p, time.Second},
	} {
		if err := ix.Predict(clk.now(), "a", 0, 0, tc.blocks, tc.ttl); !errors.Is(err, ErrBadPrediction) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if st := ix.Stats(); st.Predictions != 0 || st.Predicted != 0 {
		t.Fatalf("rejected predictions kept: %+v", st)
	}
}

func TestPredictionCapDropsSoonestExpiring(t *testing.T) {
	clk := newFakeClock()
	ix := New(Config{MaxPredictedBlocks: 10})
	p := chain(10, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ix.Predict(clk.now(), "long", 0, 0, p[:4], 10*time.Second))
	must(ix.Predict(clk.now(), "short", 0, 0, p[:4], time.Second))
	must(ix.Predict(clk.now(), "new", 0, 0, p[:4], 5*time.Second)) // 12 > 10: "short" goes
	got := byWorker(predicted(ix, p, clk.now()))
	if _, ok := got["short/0"]; ok || len(got) != 2 {
		t.Fatalf("got %v, want long and new", got)
	}
	if st := ix.Stats(); st.Predictions != 2 || st.Predicted != 8 {
		t.Fatalf("stats %+v", st)
	}
}

// ---- reference model --------------------------------------------------------

type refPrediction struct {
	worker  string
	dp      uint32
	base    int // prompt position of blocks[0]
	blocks  []kv.BlockHash
	expires time.Time
	seq     int
}

// refPredictions is the predictions' reference: a plain list, everything
// recomputed by scanning.
type refPredictions struct {
	list []*refPrediction
	max  int
	seq  int
}

func (r *refPredictions) total() int {
	n := 0
	for _, p := range r.list {
		n += len(p.blocks)
	}
	return n
}

func (r *refPredictions) predict(worker string, dp uint32, base int, blocks []kv.BlockHash, now time.Time, ttl time.Duration) {
	r.list = slices.DeleteFunc(r.list, func(p *refPrediction) bool { return !p.expires.After(now) })
	for r.total()+len(blocks) > r.max {
		i := 0
		for j, p := range r.list {
			if p.expires.Before(r.list[i].expires) || p.expires.Equal(r.list[i].expires) && p.seq < r.list[i].seq {
				i = j
			}
		}
		r.list = slices.Delete(r.list, i, i+1)
	}
	r.seq++
	r.list = append(r.list, &refPrediction{worker, dp, base, slices.Clone(blocks), now.Add(ttl), r.seq})
}

func (r *refPredictions) apply(worker string, dp uint32, ev kv.Event) {
	if ev.Kind == kv.Cleared {
		r.removeWorker(worker)
		return
	}
	if ev.Tier != kv.TierDevice {
		return
	}
	for _, p := range r.list {
		if p.worker != worker || p.dp != dp {
			continue
		}
		for _, b := range ev.Blocks {
			i := slices.Index(p.blocks, b)
			switch {
			case i < 0:
			case ev.Kind == kv.Removed:
				p.blocks = p.blocks[:i]
			case i == len(p.blocks)-1:
				p.blocks = nil
			}
		}
	}
	r.list = slices.DeleteFunc(r.list, func(p *refPrediction) bool { return len(p.blocks) == 0 })
}

func (r *refPredictions) removeWorker(worker string) {
	r.list = slices.DeleteFunc(r.list, func(p *refPrediction) bool { return p.worker == worker })
}

// find raises the real model's answer by every live prediction's common
// prefix with q from its base, where the real device prefix reaches the
// base.
func (r *refPredictions) find(real map[string]WorkerMatch, q []kv.BlockHash, now time.Time) map[string]WorkerMatch {
	device := map[string]int{}
	for k, w := range real {
		device[k] = w.Device
	}
	for _, p := range r.list {
		k := fmt.Sprintf("%s/%d", p.worker, p.dp)
		if !p.expires.After(now) || p.base > device[k] {
			continue
		}
		d := 0
		for p.base+d < len(q) && d < len(p.blocks) && q[p.base+d] == p.blocks[d] {
			d++
		}
		if d == 0 {
			continue
		}
		d += p.base
		w, ok := real[k]
		if !ok {
			w = WorkerMatch{Worker: p.worker, DPRank: p.dp}
		}
		w.raiseDevice(d)
		real[k] = w
	}
	return real
}

func checkPredicted(t *testing.T, ix *Index, ref *refModel, rp *refPredictions, now time.Time, q []kv.BlockHash) {
	t.Helper()
	want := rp.find(ref.find(q), q, now)
	got := predicted(ix, q, now)
	if gm := byWorker(got); !equalMatches(gm, want) {
		t.Fatalf("query of %d blocks: got %v, want %v", len(q), gm, want)
	}
	wh := histogram(want)
	if !slices.Equal(wh, got.DeviceDepths) {
		t.Fatalf("histogram: got %v, want %v", got.DeviceDepths, wh)
	}
	if st := ix.Stats(); st.Predicted > rp.max {
		t.Fatalf("%d predicted blocks, cap %d", st.Predicted, rp.max)
	}
}

// TestDifferentialPredictions runs random streams of real events,
// predictions (of real prompt paths, as the scheduler sends them) and clock
// ticks against the reference models, with a cap small enough to bite.
func TestDifferentialPredictions(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			tree := newBlockTree(rng, 400, 3)
			clk := newFakeClock()
			ix := New(Config{WriteChunk: 3, MaxPredictedBlocks: 120})
			ref := newRef()
			rp := &refPredictions{max: 120}
			steps := 3000
			if testing.Short() || raceEnabled {
				steps = 800
			}
			for step := 0; step < steps; step++ {
				switch x := rng.IntN(10); {
				case x < 3:
					w, dp := fmt.Sprintf("worker-%d", rng.IntN(5)), uint32(rng.IntN(2))
					p := tree.path(rng.IntN(len(tree.hashes)))
					base := 0 // a whole prompt, or (as the scheduler sends it) what the worker did not hold yet
					if rng.IntN(2) == 0 {
						base = rng.IntN(len(p))
					}
					ttl := time.Duration(1+rng.IntN(5)) * time.Second
					if err := ix.Predict(clk.now(), w, dp, base, p[base:], ttl); err != nil {
						if len(p)-base <= rp.max {
							t.Fatal(err)
						}
						continue
					}
					rp.predict(w, dp, base, p[base:], clk.now(), ttl)
				case x < 4:
					clk.tick(time.Duration(rng.IntN(1500)) * time.Millisecond)
				default:
					o := randomOp(rng, tree, 5, 2, rng.IntN(2) == 0)
					if o.remove {
						ix.RemoveWorker(o.worker)
						ref.removeWorker(o.worker)
						rp.removeWorker(o.worker)
						continue
					}
					if err := ix.Apply(o.worker, o.dp, o.ev); err != nil {
						t.Fatal(err)
					}
					ref.apply(o.worker, o.dp, o.ev)
					rp.apply(o.worker, o.dp, o.ev)
				}
				if step%10 == 0 {
					checkPredicted(t, ix, ref, rp, clk.now(), tree.path(rng.IntN(len(tree.hashes))))
				}
			}
		})
	}
}

// FuzzPredict decodes bytes into real events, predictions and clock ticks
// over a small block forest and checks lookups with predictions against the
// reference models.
func FuzzPredict(f *testing.F) {
	f.Add([]byte{0x80, 3, 0, 0x10, 3, 1, 0xc0, 0x81, 5, 0x20, 5, 2})
	f.Add([]byte("predict, store, remove, clear, tick, predict again"))
	tree := newBlockTree(rand.New(rand.NewPCG(7, 7)), 48, 2)
	f.Fuzz(func(t *testing.T, data []byte) {
		clk := newFakeClock()
		ix := New(Config{WriteChunk: 2, MaxPredictedBlocks: 30})
		ref := newRef()
		rp := &refPredictions{max: 30}
		in := fuzzInput(data)
		for len(in) > 0 {
			h, worker, dp, p, i, j := in.step(tree)
			switch (h >> 5) & 7 {
			case 0, 1:
				ev := kv.Event{Kind: kv.Stored, Tier: kv.Tier((h >> 3) & 1), Blocks: p[:j]}
				if err := ix.Apply(worker, dp, ev); err != nil {
					t.Fatal(err)
				}
				ref.apply(worker, dp, ev)
				rp.apply(worker, dp, ev)
			case 2, 3:
				ev := kv.Event{Kind: kv.Removed, Tier: kv.Tier((h >> 3) & 1), Blocks: p[i:j]}
				if err := ix.Apply(worker, dp, ev); err != nil {
					t.Fatal(err)
				}
				ref.apply(worker, dp, ev)
				rp.apply(worker, dp, ev)
			case 4:
				if (h>>3)&1 == 0 {
					_ = ix.Apply(worker, dp, kv.Event{Kind: kv.Cleared})
					ref.apply(worker, dp, kv.Event{Kind: kv.Cleared})
					rp.apply(worker, dp, kv.Event{Kind: kv.Cleared})
				} else {
					ix.RemoveWorker(worker)
					ref.removeWorker(worker)
					rp.removeWorker(worker)
				}
			case 5, 6:
				ttl := time.Duration(1+in.next()%8) * time.Second
				base := 0
				if (h>>3)&1 == 1 && i < j {
					base = i // past the root, as the scheduler sends a warm prompt
				}
				if err := ix.Predict(clk.now(), worker, dp, base, p[base:j], ttl); err != nil {
					if j-base <= rp.max {
						t.Fatal(err)
					}
					continue
				}
				rp.predict(worker, dp, base, p[base:j], clk.now(), ttl)
			default:
				clk.tick(time.Duration(in.next()) * 40 * time.Millisecond)
			}
		}
		for k := 0; k < len(tree.hashes); k += 5 {
			checkPredicted(t, ix, ref, rp, clk.now(), tree.path(k))
		}
	})
}
