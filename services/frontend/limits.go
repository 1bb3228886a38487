package frontend

import (
	"math"
	"sync"
	"time"
)

// tenantLimits bounds what each tenant may ask at once: requests per second
// (a bucket of rps requests, refilled continuously, so a burst of up to one
// second's worth passes) and generations in flight. Tenants are the keys
// file's (or the one anonymous tenant), so the tables stay that small.
type tenantLimits struct {
	rps     float64
	streams int
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	active  map[string]int
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newTenantLimits(rps float64, streams int) *tenantLimits {
	return &tenantLimits{rps: rps, streams: streams, now: time.Now, buckets: map[string]*bucket{}, active: map[string]int{}}
}

// acquire admits one request of tenant, a generation or not (a token
// count: it spends a request, not a generation slot): release ends it.
// Refused, it says which bound (tenant_rate or tenant_streams) and when to
// come back.
func (l *tenantLimits) acquire(tenant string, generation bool) (release func(), refused string, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b *bucket
	if l.rps > 0 {
		now := l.now()
		capacity := math.Max(1, l.rps)
		if b = l.buckets[tenant]; b == nil {
			b = &bucket{tokens: capacity, last: now}
			l.buckets[tenant] = b
		}
		b.tokens = math.Min(capacity, b.tokens+now.Sub(b.last).Seconds()*l.rps)
		b.last = now
		if b.tokens < 1 {
			wait := time.Duration((1 - b.tokens) / l.rps * float64(time.Second))
			return nil, "tenant_rate", max(wait, time.Second)
		}
	}
	if generation && l.streams > 0 && l.active[tenant] >= l.streams {
		return nil, "tenant_streams", time.Second
	}
	if b != nil {
		b.tokens-- // a refused request spends nothing
	}
	if !generation || l.streams <= 0 {
		return func() {}, "", 0
	}
	l.active[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.active[tenant]--; l.active[tenant] == 0 {
				delete(l.active, tenant)
			}
		})
	}, "", 0
}
