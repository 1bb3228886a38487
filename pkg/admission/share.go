package admission

// Several controllers (scheduler replicas, each owning a disjoint set of
// programs) deciding on one fleet: each sees only its own programs, yet the
// working sets they must keep within a worker's KV are all of them. Each
// decides with its share of every worker (Share): its own use scaled by the
// worker's capacity over everybody's use, so that every replica sees the
// worker exactly as full as it is and the shares sum to the capacity. A
// worker over its threshold is then brought back by all of them together,
// each shedding its part of the excess, instead of each shedding the whole
// excess from its own programs (R controllers that each compared the
// fleet-wide total with the whole capacity would pause R times too much),
// and what is free goes to each in proportion to what it holds there. (An
// equal split of what is free was tried first: on the tune half's
// overloaded level it cut the hit rate from 0.42 to 0.30 and turns/min by
// 16 %, since a replica holding most of a worker saw it fuller than it was
// and paused early; docs/scale-out.md.) A replica holding nothing on a
// worker gets an equal part of what is free there, so that it can start.
// Use is what one controller's programs use on a worker, as admission
// counts it: the tokens it compares with the capacity (Utilization's Used),
// the REASONING programs it compares with MaxPrograms, and the cold-lane
// turns running there.
type Use struct {
	Tokens    float64
	Reasoning int
	Cold      int
	// Users is how many replicas' uses this sums that use any tokens (1
	// or 0 for one replica's).
	Users int
}

// Add sums two uses.
func (u Use) Add(v Use) Use {
	return Use{Tokens: u.Tokens + v.Tokens, Reasoning: u.Reasoning + v.Reasoning, Cold: u.Cold + v.Cold, Users: u.Users + v.Users}
}

// UseOf is what this controller's programs use on worker (zero for a worker
// it does not know).
func (c *Controller) UseOf(worker string) Use {
	w := c.workers[worker]
	if w == nil {
		return Use{}
	}
	u := Use{Tokens: w.used(&c.cfg), Reasoning: w.reasoning, Cold: w.cold}
	if u.Tokens > 0 {
		u.Users = 1
	}
	return u
}

// ShareOf is Share for this controller on worker, cold lane included: the
// lane's slots (ColdLane per worker, for the whole fleet) are taken first
// come, so the controller may fill those the others do not hold. (Slots
// are not divided like tokens: nothing is shed from a lane, and dividing
// one slot among replicas leaves none.)
func (c *Controller) ShareOf(total Capacity, worker string, others Use, replicas int) Capacity {
	out := Share(total, c.UseOf(worker), others, replicas)
	if replicas > 1 && c.cfg.ColdLane > 0 {
		if out.ColdSlots = c.cfg.ColdLane - others.Cold; out.ColdSlots <= 0 {
			out.ColdSlots = -1
		}
	}
	return out
}

// Share is the capacity a controller decides with on a worker of capacity
// total among replicas controllers: its own use plus its part of what is
// left after its own and the others' (as last heard), its part being its
// fraction of the use (1/replicas while it uses nothing there). Programs
// are counted whole: a worker's REASONING slots split the same way. An
// unknown dimension (0) stays unknown; a known one never drops to 0, which
// would read as unknown, but to 1.
func Share(total Capacity, own, others Use, replicas int) Capacity {
	if replicas <= 1 {
		return total
	}
	out := total
	// The replicas that use nothing here get 1/replicas of what is free
	// each; those that do, the rest in proportion to their use.
	idle := replicas - min(others.Users, replicas-1)
	if own.Tokens > 0 {
		idle--
	}
	if total.Tokens > 0 {
		free := float64(total.Tokens) - own.Tokens - others.Tokens
		part := 1 / float64(replicas)
		if own.Tokens > 0 {
			part = (1 - float64(idle)/float64(replicas)) * own.Tokens / (own.Tokens + others.Tokens)
		}
		out.Tokens = max(1, int64(own.Tokens+free*part))
		out.WholeTokens = total.Tokens
	}
	if total.MaxPrograms > 0 {
		free := total.MaxPrograms - own.Reasoning - others.Reasoning
		if own.Reasoning > 0 {
			free = floorDiv(free*own.Reasoning*(replicas-idle), (own.Reasoning+others.Reasoning)*replicas)
		} else {
			free = floorDiv(free, replicas)
		}
		out.MaxPrograms = max(1, own.Reasoning+free)
	}
	return out
}

// floorDiv is a/b rounded down (toward −∞ for a negative a).
func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
