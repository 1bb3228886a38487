package enginesim

import (
	"errors"
	"fmt"
	"time"

	"switchyard.dev/pkg/kv"
)

// Request is one generation request.
type Request struct {
	ID        string
	SessionID string // agent session; carried on the Stored events it causes
	Prompt    []uint32
	// BlockHashes are the kvhash sequence hashes of the prompt's full blocks
	// (len(Prompt)/BlockSize of them), as the frontend computed them with
	// HashSeed. Nil means the engine computes them. The engine keeps both
	// slices without copying: the caller must not modify them afterwards.
	BlockHashes []kv.BlockHash
	// HashSeed is the kvhash seed (LoRA adapter and cache salt, see
	// kvhash.Seed) for the prompt and for the blocks of generated tokens;
	// 0 means kvhash.BaseSeed.
	HashSeed uint64
	// MaxTokens caps the output; 0 means as many as the cache can hold.
	MaxTokens int
	// OutputLen is the natural answer length: after that many tokens the
	// simulated model stops on its own (finish reason "stop"). 0 draws it
	// from [Config.OutputLenMin, Config.OutputLenMax] with the request's seed.
	OutputLen int
	// IgnoreEOS keeps generating past the natural end until MaxTokens.
	IgnoreEOS    bool
	StopTokenIDs []uint32
	// ToolCall, when set, makes the output end with exactly these tokens and
	// finish reason "tool_calls" (if MaxTokens leaves room for them).
	ToolCall []uint32
	// Seed makes the output reproducible; 0 derives one from the ID.
	Seed int64
	// Priority orders the waiting queue as vLLM's priority scheduling does:
	// lower runs earlier, 0 is normal, arrival order within a priority.
	// Preemption still takes the newest running request.
	Priority int32
	// Retain keeps the blocks this request caches ahead of unretained
	// blocks in the eviction order for this long after it frees them
	// (SGLang's retention_seconds, vLLM's retention directive duration); 0
	// retains nothing.
	Retain time.Duration
}

// FinishReason says why a request stopped; String gives OpenAI's words.
// (An integer, not a string, keeps Output free of a pointer per token.)
type FinishReason uint8

const (
	FinishNone      FinishReason = iota // still generating
	FinishStop                          // end of sequence or a stop token
	FinishLength                        // max_tokens (or the cache) reached
	FinishToolCalls                     // ended with the requested tool call
)

func (f FinishReason) String() string {
	switch f {
	case FinishNone:
		return ""
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishToolCalls:
		return "tool_calls"
	}
	return "unknown"
}

// Usage is the token accounting of a finished request.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens are the prompt tokens served from cache when the request
	// was first scheduled (any tier), OpenAI's cached_tokens.
	CachedTokens int
	// CachedByTier splits CachedTokens by the tier each block came from.
	CachedByTier [kv.NumTiers]int
}

// Validation errors of Add; test them with errors.Is.
var (
	ErrDuplicateID    = errors.New("enginesim: duplicate request id")
	ErrInvalidRequest = errors.New("enginesim: invalid request")
	ErrPromptTooLong  = errors.New("enginesim: prompt longer than the KV cache or the model's context")
	ErrBusy           = errors.New("enginesim: requests in flight")
)

type reqState uint8

const (
	stateFree reqState = iota
	stateWaiting
	stateRunning
	stateDone // finished in the current step; released at its end
)

// request is the engine's state for one request. It lives in a dense slice
// and is addressed by slot. The fields a decode step reads come first and
// fit in two cache lines (the slice's array is 64-byte aligned and a request
// is 256 bytes), which is most of the cost of a step with a full batch.
type request struct {
	id          string
	output      []uint32
	blocks      []int32 // block table: device block per sequence block
	numComputed int     // tokens whose KV is computed
	rng         uint64
	promptLen   int32
	numNamed    int32 // leading blocks already cached (named by hash)
	textLen     int32 // generated text tokens before end-of-sequence / the tool call
	maxTokens   int32
	numTool     int32 // len(toolCall)
	state       reqState
	decoding    bool // every token computed once since the last admission
	admitted    bool // scheduled at least once
	hasStops    bool
	loading     bool // admitted, its prefix still arriving from a lower tier (Engine.loads)

	prompt   []uint32
	toolCall []uint32
	stops    []uint32
	hashes   []kv.BlockHash // prompt blocks, then blocks of generated tokens as they fill
	hashSeed uint64
	session  int32
	priority int32 // Request.Priority

	cachedTokens int
	cachedByTier [kv.NumTiers]int32
	// recompute is how many of the tokens a preemption threw away are
	// still to be computed again (Stats.RePrefilledTokens).
	recompute int32
	// retainMs is Request.Retain in milliseconds (the padding after
	// recompute: a request stays at 256 bytes).
	retainMs int32
}

func (r *request) numTokens() int { return int(r.promptLen) + len(r.output) }

func (r *request) isStop(t uint32) bool {
	if !r.hasStops {
		return false
	}
	for _, s := range r.stops {
		if s == t {
			return true
		}
	}
	return false
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, args...)...)
}

// splitmix64 is the per-request generator: tiny, fast and reproducible.
func splitmix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
