package admission

import "flag"

// RegisterFlags registers the policy's knobs on fs, with their current
// values as defaults, each help text prefixed by prefix (the replay CLI
// says which policy they configure). The scheduler and `switchyard replay`
// both use it, so a knob has one name and one meaning everywhere; the
// timing knobs each shell names its own way (tick interval, idle TTL,
// retention) stay with the shells.
func (c *Config) RegisterFlags(fs *flag.FlagSet, prefix string) {
	fs.Float64Var(&c.PauseThreshold, "pause-threshold", c.PauseThreshold, prefix+"pause programs on a worker above this fraction of its KV capacity")
	fs.Float64Var(&c.PauseTarget, "pause-target", c.PauseTarget, prefix+"pausing sheds down to this fraction")
	fs.Float64Var(&c.SoftDemoteThreshold, "soft-demote-threshold", c.SoftDemoteThreshold, prefix+"soft-demote programs on workers from this utilization up to the pause threshold")
	fs.Float64Var(&c.SoftDemotePriorityJump, "soft-demote-priority-jump", c.SoftDemotePriorityJump, prefix+"priority jump (s) of soft-demoted programs' requests")
	fs.Float64Var(&c.ResumeHysteresis, "resume-hysteresis", c.ResumeHysteresis, prefix+"resume packs up to the pause threshold minus this")
	fs.Float64Var(&c.ReplicaResumeMargin, "replica-resume-margin", c.ReplicaResumeMargin, prefix+"on a worker shared among scheduler replicas, resume packs up to a further this much below that")
	fs.Float64Var(&c.ResumePriorityBoost, "resume-priority-boost", c.ResumePriorityBoost, prefix+"priority jump (s) of the first request after a resume")
	fs.DurationVar(&c.ResumeTimeout, "resume-timeout", c.ResumeTimeout, prefix+"resume a program paused this long whatever the room")
	fs.Float64Var(&c.ActingTokenWeight, "acting-token-weight", c.ActingTokenWeight, prefix+"weight of ACTING programs' tokens when deciding to pause (ThunderAgent: 1)")
	fs.DurationVar(&c.ActingDecayTau, "acting-decay-tau", c.ActingDecayTau, prefix+"half-life of ACTING programs' tokens when deciding to resume (0 = they count whole)")
	fs.Int64Var(&c.BufferPerProgram, "buffer-per-program", c.BufferPerProgram, prefix+"tokens reserved per active program")
	fs.IntVar(&c.CapacityTiers, "admission-tiers", c.CapacityTiers, prefix+"KV tiers counted as a worker's capacity, from the device down (1 = GPU only, 2 = +host, 0 = all: ThunderAgent)")
	fs.BoolVar(&c.ResumeOnLastWorker, "resume-on-last-worker", c.ResumeOnLastWorker, prefix+"resume a paused program on its last worker when it has room, where its KV is (false = ThunderAgent: the roomiest worker)")
	fs.BoolVar(&c.ResumeOversized, "resume-oversized", c.ResumeOversized, prefix+"resume a program larger than a worker's pause target once a worker has that much room (false = ThunderAgent: wait for --resume-timeout)")
	fs.Var(&c.PauseOrder, "pause-order", prefix+"which ACTING programs a full worker pauses first: smallest (ThunderAgent) or latest-return (expected back last, from the tool gaps learned online)")
	fs.Var(&c.ResumeOrder, "resume-order", prefix+"which paused programs resume first: smallest (ThunderAgent), oldest, or densest (fewest KV-seconds per turn, from the tool gaps learned online)")
	fs.DurationVar(&c.MaxWait, "max-wait", c.MaxWait, prefix+"resume a program whose turn waited this long, whatever the room, pausing others around it (0 = only --resume-timeout)")
	fs.BoolVar(&c.ReadmitOnGrowth, "readmit-on-growth", c.ReadmitOnGrowth, prefix+"a turn whose prompt outgrew its worker's headroom pauses for a new placement")
	fs.Float64Var(&c.ShedBacklog, "shed-backlog", c.ShedBacklog, prefix+"turn new sessions away (the frontend's 429) while paused programs hold more than this many fleets' KV (0 = never)")
	fs.DurationVar(&c.ShedRetryAfter, "shed-retry-after", c.ShedRetryAfter, prefix+"the Retry-After of a shed session")
	fs.DurationVar(&c.DefaultGap, "default-tool-gap", c.DefaultGap, prefix+"the tool gap expected before any has been seen")
	fs.IntVar(&c.ColdLane, "cold-lane", c.ColdLane, prefix+"turns of paused programs each worker runs at once without resuming them, behind the active programs' and unretained (0 = a paused program's turn waits for its resume)")
	fs.DurationVar(&c.ResidentRetention, "resident-retention", c.ResidentRetention, prefix+"how long the engine keeps what an active program's turn caches ahead of unretained blocks (0 = none)")
	fs.BoolVar(&c.HeldFromIndex, "held-from-index", c.HeldFromIndex, prefix+"count an idle program as holding what the KV index says is still resident of its prompt on its worker (false = its whole working set)")
	fs.DurationVar(&c.RotateAfter, "rotate-after", c.RotateAfter, prefix+"while turns wait, pause an ACTING program away longer than this (0 = never)")
}
