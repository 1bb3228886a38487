package routing

import "math"

// Overlap is how much of a request's prompt one worker already holds, in
// blocks, per tier — the flash indexer's FindMatches answer for that worker
// (Dynamo's WorkerOverlapScore). Each extension counts only blocks beyond the
// tier above it, so the fields never double count.
type Overlap struct {
	Device  int // leading blocks resident on the GPU
	HostExt int // further leading blocks on pinned host memory
	DiskExt int // further leading blocks on disk beyond host
	// SharedBeyondDevice are further leading blocks the worker can load
	// from the shared pool, beyond the device prefix and its host and disk
	// extensions (Dynamo's shared_beyond_device counts pool hits beyond the
	// device prefix even where host or disk already hold them; here a block
	// is credited once, at its best tier).
	SharedBeyondDevice int
}

// Load is a worker's load as its heartbeat reports it: what the engine sees,
// including requests other scheduler replicas sent it.
type Load struct {
	RunningRequests int
	WaitingRequests int
	ActiveBlocks    int   // KV blocks held by running requests
	CapacityTokens  int64 // KV capacity in tokens, offload tiers included
	MaxRunning      int   // max running requests; 0 = unknown
}

// Candidate is one worker eligible for a request.
type Candidate struct {
	Worker   string
	Reported Load
	Overlap  Overlap
}

// Request is what routing needs to know about one request.
type Request struct {
	ID              string // unique per request; keys the in-flight load
	SessionID       string // "" = no session
	ParentSessionID string // the session that spawned this one (sub-agent)
	ISLTokens       int    // prompt length in tokens
	Blocks          int    // number of full-block hashes sent to the indexer
	BlockSize       int    // 0 = Config.BlockSize
	// Policy overrides the router's policy for this request; "" = default.
	Policy Policy
	// Inherited: a turn of a session this router has not routed, yet not
	// the session's first (its owner among scheduler replicas changed).
	// Under an affinity policy with no binding, the worker holding most of
	// the prompt on device counts as the session's bound worker: the
	// placement rebuilt from the index, as the old owner's binding had it.
	Inherited bool
}

// Score is the cost breakdown for one candidate: every term of dynamo.md §3.1
// so that logs, traces and tests can explain a decision.
type Score struct {
	Worker  string
	Overlap Overlap

	ActivePrefillTokens   int     // in-flight prompt tokens not yet prefilled
	RawPrefillBlocks      float64 // (active prefill tokens + ISL) / block size
	Decay                 float64 // credit decay factor (1 = none)
	Credit                float64 // blocks of prefill the caches save
	AdjustedPrefillBlocks float64 // max(0, raw − credit)
	DecodeBlocks          float64 // active blocks incl. this request's prompt
	ActiveRequests        int
	Cost                  float64
}

// costInput is a candidate's load after merging tracked and reported load.
type costInput struct {
	activePrefillTokens int
	decodeBlocks        int
	activeRequests      int
}

// requestBlocks is the number of blocks the request's prompt occupies.
func requestBlocks(isl, blockSize int) int {
	if isl <= 0 || blockSize <= 0 {
		return 0
	}
	return (isl + blockSize - 1) / blockSize
}

// decay is Dynamo's overlap-credit decay: the credit of a worker whose
// prefill queue is longer than the least busy eligible worker's shrinks, so a
// cache hit behind a long queue stops looking free.
func decay(cfg *Config, activePrefill, minActivePrefill, blockSize, reqBlocks int) float64 {
	if cfg.OverlapScoreCreditDecay <= 0 || reqBlocks <= 0 {
		return 1
	}
	extra := float64(activePrefill-minActivePrefill) / float64(blockSize)
	return 1 / (1 + cfg.OverlapScoreCreditDecay*extra/float64(reqBlocks))
}

// score computes one candidate's cost into s. It fills s in place: with a
// thousand candidates per route, returning the struct by value (then
// appending it) cost as much as the arithmetic.
func score(s *Score, cfg *Config, req *Request, blockSize int, c *Candidate, in costInput, minActivePrefill int) {
	reqBlocks := requestBlocks(req.ISLTokens, blockSize)
	s.Worker = c.Worker
	s.Overlap = c.Overlap
	s.ActivePrefillTokens = in.activePrefillTokens
	s.RawPrefillBlocks = float64(in.activePrefillTokens+req.ISLTokens) / float64(blockSize)
	s.DecodeBlocks = float64(in.decodeBlocks + reqBlocks)
	s.ActiveRequests = in.activeRequests
	s.Decay = decay(cfg, in.activePrefillTokens, minActivePrefill, blockSize, reqBlocks)
	s.Credit = cfg.OverlapScoreCredit*s.Decay*float64(c.Overlap.Device) +
		cfg.HostCacheHitWeight*float64(c.Overlap.HostExt) +
		cfg.DiskCacheHitWeight*float64(c.Overlap.DiskExt) +
		cfg.SharedCacheMultiplier*float64(c.Overlap.SharedBeyondDevice)
	s.AdjustedPrefillBlocks = math.Max(0, s.RawPrefillBlocks-s.Credit)
	s.Cost = cfg.PrefillLoadScale*s.AdjustedPrefillBlocks + s.DecodeBlocks +
		cfg.DecodeActiveRequestWeight*float64(s.ActiveRequests)
}
