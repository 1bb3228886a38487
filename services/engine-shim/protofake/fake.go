package protofake

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// Engine kinds the fake imitates.
const (
	VLLM   = "vllm"
	SGLang = "sglang"
)

// Config configures a fake engine.
type Config struct {
	Engine       string // VLLM or SGLang
	Model        string
	BlockSize    int // engine tokens per block
	NumGPUBlocks int
	Topic        string
	// MapEvents encodes events as maps (vLLM ≥ #42892, SGLang ≥ #37482)
	// instead of positional arrays.
	MapEvents bool
	// ByteHashes publishes 32-byte digests instead of uint64 hashes.
	ByteHashes bool
	// TwoFrameReplay answers replays as [seq, payload] (older vLLM,
	// SGLang) instead of [topic, seq, payload].
	TwoFrameReplay bool
	// BufferSteps is how many batches replay can return.
	BufferSteps int
	// DPRank is written into each batch.
	DPRank int
	// TokenDelay paces streamed tokens (0 = as fast as possible).
	TokenDelay time.Duration
	// EventsAddr and ReplayAddr are the host:port the PUB and ROUTER
	// sockets listen on ("" = a free loopback port), so tests can lay out
	// data-parallel ranks on consecutive ports.
	EventsAddr, ReplayAddr string
}

// Engine is a running fake.
type Engine struct {
	cfg    Config
	http   *http.Server
	httpLn net.Listener
	pub    zmq4.Socket
	router zmq4.Socket
	pubEP  string
	repEP  string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	seq      uint64
	buffer   []buffered
	dropNext int
	cache    map[uint64]*list.Element // engine hash → LRU element (value *block)
	lru      *list.List               // front = most recent
	running  int
	requests []Request
	aborts   int
}

type buffered struct {
	seq     uint64
	payload []byte
}

type block struct{ hash uint64 }

// Request is what the fake received on its generation endpoint.
type Request struct {
	Path    string
	Header  http.Header
	Body    map[string]any
	Aborted bool
}

// Start runs a fake on loopback ports until ctx is done or Close.
func Start(ctx context.Context, cfg Config) (*Engine, error) {
	if cfg.Engine != VLLM && cfg.Engine != SGLang {
		return nil, fmt.Errorf("protofake: engine %q", cfg.Engine)
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.NumGPUBlocks <= 0 {
		cfg.NumGPUBlocks = 1024
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10_000
	}
	if cfg.Model == "" {
		cfg.Model = "fake-model"
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &Engine{cfg: cfg, cancel: cancel, cache: map[uint64]*list.Element{}, lru: list.New()}
	e.pub = zmq4.NewPub(ctx)
	e.router = zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("protofake-replay")))
	var err error
	if e.pubEP, err = listenZMQ(e.pub, cfg.EventsAddr); err == nil {
		e.repEP, err = listenZMQ(e.router, cfg.ReplayAddr)
	}
	if err == nil {
		e.httpLn, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	if cfg.Engine == VLLM {
		mux.HandleFunc("POST /v1/completions", e.completions)
	} else {
		mux.HandleFunc("POST /generate", e.generate)
	}
	mux.HandleFunc("GET /metrics", e.metrics)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	e.http = &http.Server{Handler: mux, BaseContext: func(net.Listener) context.Context { return ctx }}
	e.wg.Go(func() { _ = e.http.Serve(e.httpLn) })
	e.wg.Go(func() { e.serveReplay(ctx) })
	return e, nil
}

func listenZMQ(s zmq4.Socket, addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if err := s.Listen("tcp://" + addr); err != nil {
		return "", err
	}
	return "tcp://" + s.Addr().String(), nil
}

// URL is the fake's HTTP base URL.
func (e *Engine) URL() string { return "http://" + e.httpLn.Addr().String() }

// EventsEndpoint is the PUB endpoint; ReplayEndpoint the ROUTER endpoint.
func (e *Engine) EventsEndpoint() string { return e.pubEP }
func (e *Engine) ReplayEndpoint() string { return e.repEP }

// Close stops everything.
func (e *Engine) Close() {
	e.cancel()
	if e.http != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = e.http.Shutdown(sctx)
		cancel()
		_ = e.http.Close()
	}
	if e.pub != nil {
		_ = e.pub.Close()
	}
	if e.router != nil {
		_ = e.router.Close()
	}
	e.wg.Wait()
}

// DropNext makes the next n batches skip the live socket (they are still
// buffered for replay): a gap for subscribers.
func (e *Engine) DropNext(n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropNext = n
}

// Forget drops the batch with sequence seq from the replay buffer, as a
// publisher's ROUTER drops a reply past its high-water mark: a replay across
// it has a hole in the middle.
func (e *Engine) Forget(seq uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buffer = slices.DeleteFunc(e.buffer, func(b buffered) bool { return b.seq == seq })
}

// Restart imitates a restarted engine: the cache, the replay buffer and the
// sequence are gone (no event says so, as with a real restart).
func (e *Engine) Restart() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seq, e.buffer = 0, nil
	clear(e.cache)
	e.lru.Init()
}

// Clear empties the cache and publishes AllBlocksCleared.
func (e *Engine) Clear() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.cache)
	e.lru.Init()
	return e.publishLocked([]any{e.event("AllBlocksCleared", nil)})
}

// Requests returns the generation requests received so far.
func (e *Engine) Requests() []Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Request(nil), e.requests...)
}

// CachedHashes returns the engine hashes currently cached.
func (e *Engine) CachedHashes() []uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []uint64
	for h := range e.cache {
		out = append(out, h)
	}
	return out
}

// Sequence is the next batch's sequence.
func (e *Engine) Sequence() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seq
}

// --- the toy prefix cache ----------------------------------------------------

// engineHash chains like vLLM's sha256 algorithm: a digest of the parent
// digest, the block's tokens and the extra keys. It is deliberately unlike
// Switchyard's hash, so the adapter must map rather than assume.
func engineHash(parent uint64, tokens []uint32, extra string) uint64 {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], parent)
	h.Write(b[:])
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:4], t)
		h.Write(b[:4])
	}
	h.Write([]byte(extra))
	sum := h.Sum(nil)
	return binary.BigEndian.Uint64(sum[24:])
}

func (e *Engine) hashValue(h uint64) any {
	if e.cfg.ByteHashes {
		d := make([]byte, 32)
		for i := range 24 {
			d[i] = byte(h >> (i % 8 * 8))
		}
		binary.BigEndian.PutUint64(d[24:], h)
		return d
	}
	return h
}

// admit looks a token sequence up in the cache, stores its missing full
// blocks, evicts LRU blocks beyond capacity and publishes one batch. It
// returns the number of cached prompt tokens. Blocks are touched leaf first,
// so a parent is always more recent than its children and eviction keeps
// the cache prefix-closed (as vLLM's free-block queue does).
func (e *Engine) admit(tokens []uint32, lora, salt, session string) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	bs := e.cfg.BlockSize
	n := len(tokens) / bs
	hashes := make([]uint64, n)
	var parent uint64
	for i := range n {
		extra := lora
		if i == 0 {
			extra += "|" + salt
		}
		parent = engineHash(parent, tokens[i*bs:(i+1)*bs], extra)
		hashes[i] = parent
	}
	hit := 0
	for hit < n && e.cache[hashes[hit]] != nil {
		hit++
	}
	for i := n - 1; i >= 0; i-- {
		if i < hit {
			e.lru.MoveToFront(e.cache[hashes[i]])
		} else {
			e.cache[hashes[i]] = e.lru.PushFront(&block{hash: hashes[i]})
		}
	}
	if hit == n {
		return hit * bs, nil
	}
	var p uint64
	if hit > 0 {
		p = hashes[hit-1]
	}
	events := []any{e.stored(hashes[hit:], p, hit > 0, tokens[hit*bs:n*bs], lora, salt, session, hit == 0)}
	var evicted []uint64
	for e.lru.Len() > e.cfg.NumGPUBlocks {
		el := e.lru.Back()
		b := el.Value.(*block)
		e.lru.Remove(el)
		delete(e.cache, b.hash)
		evicted = append(evicted, b.hash)
	}
	if len(evicted) > 0 {
		events = append(events, e.removed(evicted))
	}
	return hit * bs, e.publishLocked(events)
}

func (e *Engine) event(tag string, fields []any, names ...string) any {
	if !e.cfg.MapEvents {
		return append([]any{tag}, fields...)
	}
	m := map[string]any{"type": tag}
	for i, n := range names {
		if i < len(fields) && fields[i] != nil {
			m[n] = fields[i]
		}
	}
	return m
}

func (e *Engine) stored(hashes []uint64, parent uint64, hasParent bool, tokens []uint32, lora, salt, session string, first bool) any {
	hs := make([]any, len(hashes))
	for i, h := range hashes {
		hs[i] = e.hashValue(h)
	}
	var p any
	if hasParent {
		p = e.hashValue(parent)
	}
	var loraName any
	if lora != "" {
		loraName = lora
	}
	names := []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys"}
	fields := []any{hs, p, tokens, e.cfg.BlockSize, nil, "GPU", loraName, nil}
	switch {
	case e.cfg.Engine == SGLang && salt != "":
		if e.cfg.MapEvents {
			fields[6] = nil
			names = append(names, "cache_salt")
			fields = append(fields, salt)
		} else {
			fields[6] = map[string]any{"cache_salt": salt} // SGLang's salted store
		}
	case e.cfg.Engine == VLLM && (salt != "" || lora != ""):
		// extra_keys per block: LoRA name, then the salt in the request's
		// first block only.
		extra := make([]any, len(hashes))
		for i := range extra {
			var k []any
			if lora != "" {
				k = append(k, lora)
			}
			if i == 0 && first && salt != "" {
				k = append(k, salt)
			}
			if len(k) > 0 {
				extra[i] = k
			}
		}
		fields[7] = extra
	}
	if session != "" && e.cfg.MapEvents {
		names = append(names, "session_id")
		fields = append(fields, session)
	}
	if !e.cfg.MapEvents {
		// Positional: trailing defaults omitted, as msgspec does.
		for len(fields) > 4 && fields[len(fields)-1] == nil {
			fields = fields[:len(fields)-1]
		}
	}
	return e.event("BlockStored", fields, names...)
}

func (e *Engine) removed(hashes []uint64) any {
	hs := make([]any, len(hashes))
	for i, h := range hashes {
		hs[i] = e.hashValue(h)
	}
	return e.event("BlockRemoved", []any{hs, "GPU"}, "block_hashes", "medium")
}

// publishLocked sends one batch and buffers it for replay.
func (e *Engine) publishLocked(events []any) error {
	var rank any = e.cfg.DPRank
	payload, err := encode([]any{float64(time.Now().UnixNano()) / 1e9, events, rank})
	if err != nil {
		return err
	}
	seq := e.seq
	e.seq++
	e.buffer = append(e.buffer, buffered{seq, payload})
	if len(e.buffer) > e.cfg.BufferSteps {
		e.buffer = e.buffer[len(e.buffer)-e.cfg.BufferSteps:]
	}
	if e.dropNext > 0 {
		e.dropNext--
		return nil
	}
	return e.pub.Send(zmq4.NewMsgFrom([]byte(e.cfg.Topic), be(seq), payload))
}

func encode(v any) ([]byte, error) {
	var buf strings.Builder
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(buf.String()), nil
}

func be(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

const endSeq = ^uint64(0)

// serveReplay answers [identity, "", start] with the buffered batches from
// start, then the end marker.
func (e *Engine) serveReplay(ctx context.Context) {
	for {
		m, err := e.router.Recv()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			continue
		}
		f := m.Frames
		if len(f) < 2 || len(f[len(f)-1]) != 8 {
			continue
		}
		id := f[0]
		start := binary.BigEndian.Uint64(f[len(f)-1])
		e.mu.Lock()
		var out []buffered
		for _, b := range e.buffer {
			if b.seq >= start {
				out = append(out, b)
			}
		}
		e.mu.Unlock()
		for _, b := range out {
			e.reply(id, be(b.seq), b.payload)
		}
		e.reply(id, be(endSeq), nil)
	}
}

func (e *Engine) reply(id, seq, payload []byte) {
	frames := [][]byte{id, {}}
	if !e.cfg.TwoFrameReplay {
		frames = append(frames, []byte(e.cfg.Topic))
	}
	frames = append(frames, seq, payload)
	if payload == nil {
		frames[len(frames)-1] = []byte{}
	}
	_ = e.router.SendMulti(zmq4.NewMsgFrom(frames...))
}
