package admission

// SessionCap is the plain admission an operator tries first: at most Limit
// sessions hold a slot at once, and the others wait for one in arrival
// order. A session takes its slot with its first turn and gives it back
// when it ends; it knows nothing of KV, phases or workers. (The replay's
// kv_cap baseline; the scheduler does not offer it.)
type SessionCap struct {
	limit   int
	holders map[Key]bool
	queue   []Key
}

// NewSessionCap returns a cap of limit sessions (at least one).
func NewSessionCap(limit int) *SessionCap {
	return &SessionCap{limit: max(limit, 1), holders: map[Key]bool{}}
}

// Limit is the number of slots.
func (c *SessionCap) Limit() int { return c.limit }

// Admit reports whether the session holds a slot, taking a free one if
// there is one and nobody waits; otherwise the session joins the queue
// (once) and Release will name it when its turn comes.
func (c *SessionCap) Admit(k Key) bool {
	if c.holders[k] {
		return true
	}
	if len(c.holders) < c.limit && len(c.queue) == 0 {
		c.holders[k] = true
		return true
	}
	for _, q := range c.queue {
		if q == k {
			return false
		}
	}
	c.queue = append(c.queue, k)
	return false
}

// Release gives back the session's slot (or drops it from the queue) and
// returns the waiting sessions that now hold one, in arrival order.
func (c *SessionCap) Release(k Key) []Key {
	if !c.holders[k] {
		for i, q := range c.queue {
			if q == k {
				c.queue = append(c.queue[:i], c.queue[i+1:]...)
				break
			}
		}
		return nil
	}
	delete(c.holders, k)
	var admitted []Key
	for len(c.holders) < c.limit && len(c.queue) > 0 {
		next := c.queue[0]
		c.queue = c.queue[1:]
		c.holders[next] = true
		admitted = append(admitted, next)
	}
	return admitted
}

// Holding and Waiting count the sessions with a slot and in the queue.
func (c *SessionCap) Holding() int { return len(c.holders) }
func (c *SessionCap) Waiting() int { return len(c.queue) }
