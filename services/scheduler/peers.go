package scheduler

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/services/servicekit"
)

// Scheduler replicas. Each replica owns the programs frontends send it (by
// rendezvous hashing of the session over the replica list, turns.Owner)
// and routes them from the fleet's own state, which every replica reads
// alike: the workers' registrations and load reports (every shim registers
// with every replica) and the flash index. The one thing a replica lacks is
// what the others' programs hold on each worker, which its admission must
// count: every peer streams its use to it (WatchAdmissionUse), looked at
// each PeerSyncInterval and sent when it changed or, unchanged, after a
// heartbeat of a third of PeerStaleAfter, and it decides with its share of
// each worker (turns.Pipeline.Share). A peer not heard for PeerStaleAfter
// counts as gone: its share returns to the replicas that are. So what a
// replica counts of the others is at most PeerSyncInterval plus a message
// old while they answer, and a dead peer's use stops counting
// PeerStaleAfter after its last message. (A poll each interval, as this
// was first built, cost two messages and their wake-ups on both sides per
// peer and interval even on an idle fleet; docs/scale-out.md.)

// peers follows the other replicas.
type peers struct {
	self  string // this process's replica id
	every time.Duration
	stale time.Duration
	list  []*peer
	since time.Time // when runPeers started following them
	// caughtUp: once every peer had answered or failed, this replica's
	// registry held every worker its live peers hold (it stays so).
	caughtUp atomic.Bool
	// rounds counts the uses heard from any peer (peerSum).
	rounds atomic.Uint64
}

// peer is one address of the peer list and what it last said.
type peer struct {
	addr   string
	conn   *grpc.ClientConn
	client schedulerv1.SchedulerServiceClient

	mu     sync.Mutex
	id     string // the replica that answered; self for this process
	heard  time.Time
	uses   map[string]admission.Use
	failed bool // its stream broke or could not open (logged once per outage)
	tried  bool // it has answered or failed since this replica started
	self   bool // the address is this process's own
}

// newPeers dials every address of the list (lazily: peers start in any
// order). It returns nil for an empty list: one replica.
func newPeers(list string, every, stale time.Duration, dial func(string, ...grpc.DialOption) (*grpc.ClientConn, error)) (*peers, error) {
	addrs := servicekit.SplitList(list)
	if len(addrs) == 0 {
		return nil, nil
	}
	// A process's id, new at every start (as a shim's epoch is).
	p := &peers{self: strconv.FormatUint(servicekit.NewEpoch(), 16), every: every, stale: stale}
	for _, a := range addrs {
		conn, err := dial(a)
		if err != nil {
			p.close()
			return nil, err
		}
		p.list = append(p.list, &peer{addr: a, conn: conn, client: schedulerv1.NewSchedulerServiceClient(servicekit.NewCallConn(conn))})
	}
	return p, nil
}

func (p *peers) close() {
	for _, q := range p.list {
		q.conn.Close()
	}
}

// GetAdmissionUse is this replica's use of every worker its admission
// knows.
func (s *Service) GetAdmissionUse(context.Context, *schedulerv1.GetAdmissionUseRequest) (*schedulerv1.GetAdmissionUseResponse, error) {
	ids, uses := s.admissionUse()
	return s.useToProto(ids, uses), nil
}

// The bounds of a WatchAdmissionUse stream's pace.
const (
	minUseInterval     = 10 * time.Millisecond
	defaultUseInterval = 100 * time.Millisecond
	defaultUseBeat     = time.Second
)

// WatchAdmissionUse sends this replica's use at once, then at each interval
// in which it changed, and unchanged after a heartbeat. When this replica
// stops, the stream ends without an error: the peer hears it leave.
func (s *Service) WatchAdmissionUse(req *schedulerv1.WatchAdmissionUseRequest, stream grpc.ServerStreamingServer[schedulerv1.WatchAdmissionUseResponse]) error {
	every := defaultUseInterval
	if d := req.GetInterval(); d != nil {
		every = max(d.AsDuration(), minUseInterval)
	}
	beat := defaultUseBeat
	if d := req.GetHeartbeat(); d != nil {
		beat = d.AsDuration()
	}
	beat = max(beat, every)
	select {
	case <-s.stop:
		return nil // stopping: nothing to tell (a peer reconnecting meanwhile must not hear it alive)
	default:
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var (
		sentIDs  []string
		sentUses []admission.Use
		sentAt   time.Time
	)
	for {
		ids, uses := s.admissionUse()
		// Unchanged, it goes out at the last tick before a heartbeat's
		// silence would pass: never more than beat apart.
		if sentAt.IsZero() || time.Since(sentAt)+every > beat || !slices.Equal(ids, sentIDs) || !slices.Equal(uses, sentUses) {
			if err := stream.Send(&schedulerv1.WatchAdmissionUseResponse{Use: s.useToProto(ids, uses)}); err != nil {
				return err
			}
			sentIDs, sentUses, sentAt = ids, uses, time.Now()
		}
		select {
		case <-t.C:
		case <-stream.Context().Done():
			return toStatus(stream.Context().Err())
		case <-s.stop:
			return nil
		}
	}
}

// admissionUse is this replica's use of every worker in view.
func (s *Service) admissionUse() (ids []string, uses []admission.Use) {
	view := s.reg.View()
	ids = make([]string, len(view.Workers))
	for i, w := range view.Workers {
		ids[i] = w.ID
	}
	s.mu.Lock()
	uses = s.pipe.UsesOf(ids)
	s.mu.Unlock()
	return ids, uses
}

// useToProto is what admissionUse said, as told to a peer now.
func (s *Service) useToProto(ids []string, uses []admission.Use) *schedulerv1.GetAdmissionUseResponse {
	resp := &schedulerv1.GetAdmissionUseResponse{ReplicaId: s.replicaID()}
	for i, u := range uses {
		resp.Workers = append(resp.Workers, &schedulerv1.WorkerUse{
			WorkerId: ids[i], Tokens: u.Tokens, Reasoning: uint32(u.Reasoning), Cold: uint32(u.Cold),
		})
	}
	if len(uses) > 0 {
		now := s.now()
		resp.Waiting, resp.Paused = demandToProto(uses[0].Waiting, now), demandToProto(uses[0].Paused, now)
	}
	return resp
}

// replicaID names this process to its peers ("" without peers).
func (s *Service) replicaID() string {
	if s.peers == nil {
		return ""
	}
	return s.peers.self
}

// runPeers follows every peer's use until ctx ends, and each interval
// counts the live replicas and checks whether this one has caught up.
func (s *Service) runPeers(ctx context.Context) {
	s.peers.since = time.Now()
	var wg sync.WaitGroup
	for _, q := range s.peers.list {
		wg.Go(func() { s.followPeer(ctx, q) })
	}
	defer wg.Wait()
	t := time.NewTicker(s.peers.every)
	defer t.Stop()
	for {
		s.checkPeers()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// followPeer hears q's use until ctx ends or q turns out to be this very
// process. A stream that ended is opened again each interval, and so is one
// silent past the staleness bound (a half-open connection, whose Recv would
// wait for keepalive's verdict), as a poll would have failed and been sent
// again.
func (s *Service) followPeer(ctx context.Context, q *peer) {
	req := &schedulerv1.WatchAdmissionUseRequest{Interval: durationpb.New(s.peers.every), Heartbeat: durationpb.New(s.peers.stale / 3)}
	// The open stream's cancel, and the timer that calls it once the
	// stream has been silent for the bound (stand-ins until one opens).
	end := context.CancelFunc(func() {})
	silent := time.AfterFunc(time.Hour, func() {})
	defer func() { silent.Stop(); end() }()
	servicekit.Watch(ctx, servicekit.Backoff{Min: s.peers.every, Max: s.peers.every},
		func(ctx context.Context) (grpc.ServerStreamingClient[schedulerv1.WatchAdmissionUseResponse], error) {
			silent.Stop()
			end()
			var sctx context.Context
			sctx, end = context.WithCancel(ctx)
			silent = time.AfterFunc(s.peers.stale, end)
			return q.client.WatchAdmissionUse(sctx, req)
		},
		func(resp *schedulerv1.WatchAdmissionUseResponse) bool {
			silent.Reset(s.peers.stale)
			return s.heard(q, resp.GetUse())
		},
		func(err error) { s.peerFailed(q, err) })
}

// heard records a use q sent, and says whether to go on hearing q (not
// when q is this process).
func (s *Service) heard(q *peer, resp *schedulerv1.GetAdmissionUseResponse) bool {
	now := s.now()
	waiting, paused := demandFromProto(resp.GetWaiting(), now), demandFromProto(resp.GetPaused(), now)
	uses := make(map[string]admission.Use, len(resp.GetWorkers()))
	for _, w := range resp.GetWorkers() {
		u := admission.Use{Tokens: w.GetTokens(), Reasoning: int(w.GetReasoning()), Cold: int(w.GetCold()),
			Waiting: waiting, Paused: paused}
		if u.Tokens > 0 {
			u.Users = 1
		}
		uses[w.GetWorkerId()] = u
	}
	q.mu.Lock()
	if q.failed {
		s.log.Info("scheduler peer answers again", "peer", q.addr)
	}
	q.failed, q.tried = false, true
	q.id, q.heard, q.uses = resp.GetReplicaId(), time.Now(), uses
	q.self = q.id == s.peers.self
	self := q.self
	q.mu.Unlock()
	s.peers.rounds.Add(1)
	if !s.peers.caughtUp.Load() {
		s.checkPeers() // a replica that just started routes as soon as it may
	}
	return !self
}

// peerFailed records that q's stream ended (io.EOF: q is stopping), broke
// or could not open; it is called while this replica runs, not once it
// stops.
func (s *Service) peerFailed(q *peer, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if errors.Is(err, io.EOF) {
		if !q.failed {
			s.log.Info("scheduler peer stopped", "peer", q.addr)
		}
	} else {
		if !q.failed {
			s.log.Warn("scheduler peer did not answer", "peer", q.addr, "err", err)
		}
		s.metrics.peerFailures.Inc()
	}
	q.failed, q.tried = true, true
}

// checkPeers counts the live replicas and, once every peer has answered
// or failed (allTried), whether this replica has caught up.
func (s *Service) checkPeers() {
	s.metrics.replicas.Set(float64(s.peers.live()))
	if !s.peers.caughtUp.Load() && s.peers.allTried(time.Now()) && s.peers.holdsTheirWorkers(s.reg.View()) {
		if s.peers.caughtUp.CompareAndSwap(false, true) {
			s.log.Info("caught up with the other replicas' workers: routing", "workers", len(s.reg.View().Workers))
		}
	}
}

// allTried: every peer has answered or failed since this replica started
// following them, or an interval has passed since (a peer whose stream has
// not even opened by then counts as failed, as a poll would have).
func (p *peers) allTried(now time.Time) bool {
	if now.Sub(p.since) >= p.every {
		return true
	}
	for _, q := range p.list {
		q.mu.Lock()
		tried := q.tried
		q.mu.Unlock()
		if !tried {
			return false
		}
	}
	return true
}

// holdsTheirWorkers: every worker a live peer holds is in view. A replica
// that just started has not had every shim's registration yet; routing
// then would send sessions whose worker has not registered to another
// (moving them off their cache), so until then it refuses routes
// (UNAVAILABLE: the frontend asks the next replica).
func (p *peers) holdsTheirWorkers(view *registry.View) bool {
	holds := true
	_, _ = p.eachHeard(time.Now(), func(uses map[string]admission.Use) {
		for w := range uses {
			holds = holds && view.Index(w) >= 0
		}
	})
	return holds
}

// eachHeard calls f, under the peer's lock, with the uses of every other
// replica heard within the staleness bound at now (two addresses of one
// replica once) and returns how many replicas decide on the fleet, this one
// included, and when the first of those heard will be stale (zero: none).
func (p *peers) eachHeard(now time.Time, f func(uses map[string]admission.Use)) (n int, staleAt time.Time) {
	seen := append(make([]string, 0, 8), p.self)
	for _, q := range p.list {
		q.mu.Lock()
		if q.id != "" && !q.self && now.Sub(q.heard) <= p.stale && !slices.Contains(seen, q.id) {
			seen = append(seen, q.id)
			f(q.uses)
			if at := q.heard.Add(p.stale); staleAt.IsZero() || at.Before(staleAt) {
				staleAt = at
			}
		}
		q.mu.Unlock()
	}
	return len(seen), staleAt
}

// live counts the replicas heard within the staleness bound, this one
// included.
func (p *peers) live() int {
	n, _ := p.eachHeard(time.Now(), func(map[string]admission.Use) {})
	return n
}

// others sums, per worker, the uses of the live peers (into sum, cleared
// first) and returns how many replicas decide on the fleet and until when
// that holds without a new use heard (eachHeard).
func (p *peers) others(sum map[string]admission.Use, now time.Time) (n int, staleAt time.Time) {
	clear(sum)
	return p.eachHeard(now, func(uses map[string]admission.Use) {
		for w, u := range uses {
			sum[w] = sum[w].Add(u)
		}
	})
}

// peerSum is the other replicas' use as last summed (peers.others), kept
// while it holds: what the peers said changes only when one is heard, and
// who counts changes only then or when one of them goes stale. Admission
// reads it at every turn; summing it again each time was half of the
// share computation's cost with three replicas.
type peerSum struct {
	use map[string]admission.Use
	n   int
	// version counts the sums: admission computes again only the shares
	// of workers whose own use changed while it stays (SetShares).
	version uint64
	round   uint64    // the uses heard (peers.rounds) when it was summed
	staleAt time.Time // when the first of the peers it counts goes stale
	summed  bool
}

// refresh sums the peers again when a use has been heard since, or a
// peer it counted has gone stale.
func (ps *peerSum) refresh(p *peers, now time.Time) {
	round := p.rounds.Load()
	if ps.summed && round == ps.round && (ps.staleAt.IsZero() || now.Before(ps.staleAt)) {
		return
	}
	ps.n, ps.staleAt = p.others(ps.use, now)
	ps.round, ps.summed = round, true
	ps.version++
}

// shareLocked makes admission decide with this replica's share of every
// worker, from the peers' uses as last heard (wall-clock staleness); s.mu
// is held. Without peers it does nothing.
func (s *Service) shareLocked() {
	if s.peers == nil {
		return
	}
	s.peerSum.refresh(s.peers, time.Now())
	s.pipe.Share(func(w string) admission.Use { return s.peerSum.use[w] }, s.peerSum.n, s.peerSum.version)
}

// demandToProto is d as told at now: its oldest pause as an age.
func demandToProto(d admission.Demand, now time.Time) *schedulerv1.AdmissionDemand {
	out := &schedulerv1.AdmissionDemand{Tokens: d.Tokens}
	if !d.Since.IsZero() {
		out.OldestPausedFor = durationpb.New(max(now.Sub(d.Since), 0))
	}
	return out
}

// demandFromProto is a peer's demand heard at now, its oldest pause put on
// this replica's clock (late by the message's latency).
func demandFromProto(d *schedulerv1.AdmissionDemand, now time.Time) admission.Demand {
	out := admission.Demand{Tokens: d.GetTokens()}
	if d.GetOldestPausedFor() != nil {
		out.Since = now.Add(-d.GetOldestPausedFor().AsDuration())
	}
	return out
}
