package llmd

import (
	"bufio"
	"container/list"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"switchyard.dev/pkg/kv"
	"switchyard.dev/pkg/kvhash"
)

// The inputs below are shared by both systems: the same uint64 block keys,
// the same worker names, the same event order. Keys are precomputed so the
// comparison is of the indexes, not of the hashers.

var podNames = func() []string {
	out := make([]string, 1024)
	for i := range out {
		out[i] = fmt.Sprintf("worker-%d", i)
	}
	return out
}()

func chain(n int, seed uint64) []kv.BlockHash {
	out := make([]kv.BlockHash, n)
	for i := range out {
		local := kv.LocalHash(seed*1_000_003 + uint64(i) + 1)
		if i == 0 {
			out[i] = kvhash.Root(local)
		} else {
			out[i] = kvhash.Chain(out[i-1], local)
		}
	}
	return out
}

func extend(parent kv.BlockHash, n int, seed uint64) []kv.BlockHash {
	out := make([]kv.BlockHash, n)
	for i := range out {
		out[i] = kvhash.Chain(parent, kv.LocalHash(seed*1_000_003+uint64(i)+1))
		parent = out[i]
	}
	return out
}

// mooncakeTrace is the conversation trace; SWITCHYARD_MOONCAKE_TRACE
// overrides the path and MOONCAKE_REQUESTS the number of requests replayed
// (default 3000: llm-d needs about 1 KB per distinct block, so the full
// trace's million blocks would need a gigabyte for it alone).
func mooncakeTrace() (string, int) {
	p := os.Getenv("SWITCHYARD_MOONCAKE_TRACE")
	if p == "" {
		p = "../../../shared/data/mooncake/conversation_trace.jsonl"
	}
	n := 3000
	if v, err := strconv.Atoi(os.Getenv("MOONCAKE_REQUESTS")); err == nil && v > 0 {
		n = v
	}
	return p, n
}

// expandIDs: each 512-token Mooncake hash id becomes 32 16-token blocks.
func expandIDs(ids []uint64) []kv.BlockHash {
	const per = 512 / kvhash.DefaultBlockSize
	out := make([]kv.BlockHash, 0, len(ids)*per)
	var tok [kvhash.DefaultBlockSize]uint32
	for _, id := range ids {
		for j := 0; j < per; j++ {
			for k := range tok {
				tok[k] = uint32(id*per+uint64(j))*16 + uint32(k)
			}
			local := kvhash.LocalHash(tok[:], kvhash.BaseSeed)
			if len(out) == 0 {
				out = append(out, kvhash.Root(local))
			} else {
				out = append(out, kvhash.Chain(out[len(out)-1], local))
			}
		}
	}
	return out
}

type workerEvent struct {
	worker int
	ev     kv.Event
}

// lruEngine: paged prefix cache, LRU, blocks touched tail first so leaves
// are evicted before their prefixes.
type lruEngine struct {
	cap   int
	order *list.List
	where map[kv.BlockHash]*list.Element
}

func (e *lruEngine) serve(blocks []kv.BlockHash) (stored, removed kv.Event) {
	k := 0
	for k < len(blocks) {
		if _, ok := e.where[blocks[k]]; !ok {
			break
		}
		k++
	}
	stored = kv.Event{Kind: kv.Stored}
	if k < len(blocks) {
		if k > 0 {
			stored.Parent = blocks[k-1]
		}
		stored.Blocks = blocks[k:]
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		if el, ok := e.where[blocks[i]]; ok {
			e.order.MoveToFront(el)
		} else {
			e.where[blocks[i]] = e.order.PushFront(blocks[i])
		}
	}
	removed = kv.Event{Kind: kv.Removed}
	for e.order.Len() > e.cap {
		el := e.order.Back()
		b := el.Value.(kv.BlockHash)
		e.order.Remove(el)
		delete(e.where, b)
		removed.Blocks = append(removed.Blocks, b)
	}
	return stored, removed
}

// mooncakeEvents replays the first requests of the conversation trace over
// 64 workers (affinity on the first id after the shared system prompt,
// 16,384-block caches) and returns the KV events and their block count.
func mooncakeEvents() ([]workerEvent, int, error) {
	path, limit := mooncakeTrace()
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	engines := make([]*lruEngine, 64)
	for i := range engines {
		engines[i] = &lruEngine{cap: 16384, order: list.New(), where: map[kv.BlockHash]*list.Element{}}
	}
	var evs []workerEvent
	blocks := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 0; sc.Scan() && n < limit; n++ {
		var rec struct {
			HashIDs []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, 0, err
		}
		if len(rec.HashIDs) == 0 {
			continue
		}
		key := rec.HashIDs[min(1, len(rec.HashIDs)-1)]
		w := int((key * 0x9e3779b97f4a7c15) >> 58)
		st, rm := engines[w].serve(expandIDs(rec.HashIDs))
		for _, ev := range []kv.Event{st, rm} {
			if len(ev.Blocks) > 0 {
				evs = append(evs, workerEvent{w, ev})
				blocks += len(ev.Blocks)
			}
		}
	}
	return evs, blocks, sc.Err()
}

// rampPrompt is the llm-d anchor's lookup shape: pod i holds the first
// (i+1)*(8192/pods) blocks of one 8,192-block prompt.
func rampPrompt() []kv.BlockHash { return chain(8192, 42) }

func threadCPU() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
