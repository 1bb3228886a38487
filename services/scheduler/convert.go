package scheduler

import (
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "switchyard.dev/gen/switchyard/scheduler/v1"
	workerv1 "switchyard.dev/gen/switchyard/worker/v1"
	"switchyard.dev/pkg/admission"
	"switchyard.dev/pkg/registry"
	"switchyard.dev/pkg/routing"
	"switchyard.dev/services/servicekit/kvwire"
)

func workerFromProto(w *workerv1.Worker) registry.Worker {
	c := w.GetCapacity()
	return registry.Worker{
		ID: w.GetWorkerId(), Address: w.GetAddress(), Engine: w.GetEngine(), Model: w.GetModel(),
		BlockSize: int(w.GetBlockSize()), DPSize: int(w.GetDpSize()), Epoch: w.GetEpoch(),
		Capacity: registry.Capacity{
			GPUBlocks: int(c.GetGpuBlocks()), HostBlocks: int(c.GetHostBlocks()), DiskBlocks: int(c.GetDiskBlocks()),
			KVCapacityTokens: int64(c.GetKvCapacityTokens()), MaxRunning: int(c.GetMaxRunningRequests()),
		},
		Load:  loadFromProto(w.GetLoad()),
		Hints: kvwire.HintSupport(w.GetHintSupport()),
	}
}

func loadFromProto(l *workerv1.WorkerLoad) registry.Load {
	out := registry.Load{
		RunningRequests: int(l.GetRunningRequests()), WaitingRequests: int(l.GetWaitingRequests()),
		ActiveKVBlocks: int(l.GetActiveKvBlocks()), UsedKVBlocks: int(l.GetUsedKvBlocks()),
		TotalKVBlocks: int(l.GetTotalKvBlocks()), PrefixHitRate: l.GetPrefixHitRate(), Preemptions: l.GetPreemptions(),
	}
	if l.GetObservedAt() != nil {
		out.ObservedAt = l.GetObservedAt().AsTime()
	}
	if l != nil {
		out.HostUsedBlocks, out.DiskUsedBlocks = copyOf(l.HostUsedBlocks), copyOf(l.DiskUsedBlocks)
		out.EvictedBlocks, out.RePrefilledTokens = copyOf(l.EvictedBlocks), copyOf(l.RePrefilledTokens)
	}
	return out
}

func workerToProto(w registry.Worker) *workerv1.Worker {
	out := &workerv1.Worker{
		WorkerId: w.ID, Address: w.Address, Engine: w.Engine, Model: w.Model,
		BlockSize: uint32(w.BlockSize), DpSize: uint32(w.DPSize), Epoch: w.Epoch,
		Capacity: &workerv1.WorkerCapacity{
			GpuBlocks: uint32(w.Capacity.GPUBlocks), HostBlocks: uint32(w.Capacity.HostBlocks),
			DiskBlocks: uint32(w.Capacity.DiskBlocks), KvCapacityTokens: uint64(w.Capacity.KVCapacityTokens),
			MaxRunningRequests: uint32(w.Capacity.MaxRunning),
		},
		Load: &workerv1.WorkerLoad{
			RunningRequests: uint32(w.Load.RunningRequests), WaitingRequests: uint32(w.Load.WaitingRequests),
			ActiveKvBlocks: uint32(w.Load.ActiveKVBlocks), UsedKvBlocks: uint32(w.Load.UsedKVBlocks),
			TotalKvBlocks: uint32(w.Load.TotalKVBlocks), PrefixHitRate: w.Load.PrefixHitRate, Preemptions: w.Load.Preemptions,
			HostUsedBlocks: copyOf(w.Load.HostUsedBlocks), DiskUsedBlocks: copyOf(w.Load.DiskUsedBlocks),
			EvictedBlocks: copyOf(w.Load.EvictedBlocks), RePrefilledTokens: copyOf(w.Load.RePrefilledTokens),
		},
		HintSupport: kvwire.HintSupportProto(w.Hints),
	}
	if !w.Load.ObservedAt.IsZero() {
		out.Load.ObservedAt = timestamppb.New(w.Load.ObservedAt)
	}
	if !w.LeaseExpiresAt.IsZero() {
		out.LeaseExpiresAt = timestamppb.New(w.LeaseExpiresAt)
	}
	return out
}

// candidate is a registered worker as routing sees it.
func candidate(w *registry.Worker, ov routing.Overlap) routing.Candidate {
	return routing.Candidate{
		Worker: w.ID,
		Reported: routing.Load{
			RunningRequests: w.Load.RunningRequests, WaitingRequests: w.Load.WaitingRequests,
			ActiveBlocks: w.Load.ActiveKVBlocks, CapacityTokens: w.Capacity.KVCapacityTokens,
			MaxRunning: w.Capacity.MaxRunning,
		},
		Overlap: ov,
	}
}

// scoresToProto explains a decision: the chosen worker's breakdown first,
// then the limit−1 cheapest others (a fleet of a thousand workers does not
// need a thousand scores in every response). limit <= 0 means all.
func scoresToProto(scores []routing.Score, chosen, limit int) []*schedulerv1.WorkerScore {
	idx := make([]int, 0, len(scores))
	idx = append(idx, chosen)
	if limit <= 0 || limit >= len(scores) {
		for i := range scores {
			if i != chosen {
				idx = append(idx, i)
			}
		}
	} else {
		// Partial selection: keep the limit−1 cheapest. The most expensive
		// one kept is found again only when it is replaced, so a fleet
		// costs one comparison per worker, not limit.
		worst := -1
		for i := range scores {
			if i == chosen {
				continue
			}
			if len(idx) < limit {
				idx = append(idx, i)
				continue
			}
			if worst < 0 {
				worst = mostExpensive(scores, idx)
			}
			if scores[i].Cost < scores[idx[worst]].Cost {
				idx[worst] = i
				worst = -1
			}
		}
		rest := idx[1:]
		sort.Slice(rest, func(a, b int) bool { return scores[rest[a]].Cost < scores[rest[b]].Cost })
	}
	out := make([]*schedulerv1.WorkerScore, len(idx))
	for k, i := range idx {
		s := scores[i]
		out[k] = &schedulerv1.WorkerScore{
			WorkerId:                 s.Worker,
			DeviceOverlapBlocks:      uint32(s.Overlap.Device),
			HostExtensionBlocks:      uint32(s.Overlap.HostExt),
			DiskExtensionBlocks:      uint32(s.Overlap.DiskExt),
			SharedBeyondDeviceBlocks: uint32(s.Overlap.SharedBeyondDevice),
			CreditBlocks:             s.Credit,
			PrefillBlocks:            s.AdjustedPrefillBlocks,
			DecodeBlocks:             s.DecodeBlocks,
			ActiveRequests:           uint32(s.ActiveRequests),
			Cost:                     s.Cost,
			Chosen:                   i == chosen,
		}
	}
	return out
}

// mostExpensive returns the position in idx[1:] (idx[0] is the chosen
// worker) of the highest cost, the first on ties.
func mostExpensive(scores []routing.Score, idx []int) int {
	worst := 1
	for j := 2; j < len(idx); j++ {
		if scores[idx[j]].Cost > scores[idx[worst]].Cost {
			worst = j
		}
	}
	return worst
}

var phases = map[admission.Phase]schedulerv1.ProgramPhase{
	admission.Reasoning: schedulerv1.ProgramPhase_PROGRAM_PHASE_REASONING,
	admission.Acting:    schedulerv1.ProgramPhase_PROGRAM_PHASE_ACTING,
}

var lifecycles = map[admission.Lifecycle]schedulerv1.ProgramLifecycle{
	admission.Active:     schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_ACTIVE,
	admission.Paused:     schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_PAUSED,
	admission.Terminated: schedulerv1.ProgramLifecycle_PROGRAM_LIFECYCLE_TERMINATED,
}

func lifecycleFromProto(l schedulerv1.ProgramLifecycle) admission.Lifecycle {
	for k, v := range lifecycles {
		if v == l {
			return k
		}
	}
	return 0
}

// programToProto is p as the API shows it at now: a program paused now
// counts its pause so far in paused_total.
func programToProto(p admission.Program, now time.Time) *schedulerv1.Program {
	paused := p.PausedTotal
	if p.Lifecycle == admission.Paused && !p.PausedAt.IsZero() && now.After(p.PausedAt) {
		paused += now.Sub(p.PausedAt)
	}
	out := &schedulerv1.Program{
		SessionId: p.Key.SessionID, Tenant: p.Key.Tenant, ParentSessionId: p.ParentSessionID,
		Phase: phases[p.Phase], Lifecycle: lifecycles[p.Lifecycle], WorkerId: p.Worker,
		TokenTotal: uint64(max(p.TokenTotal, 0)), StepCount: uint32(p.StepCount), MarkedForPause: p.MarkedForPause,
		PausedTotal: durationpb.New(paused), LastWorkerId: p.LastWorker,
	}
	if h, ok := p.HeldTokens(); ok {
		out.HeldTokens = proto.Uint64(uint64(max(h, 0)))
	}
	if !p.PhaseSince.IsZero() {
		out.PhaseSince = timestamppb.New(p.PhaseSince)
	}
	if !p.LastActive.IsZero() {
		out.LastActive = timestamppb.New(p.LastActive)
	}
	return out
}

func durationOrZero(d time.Duration) *durationpb.Duration {
	if d < 0 {
		d = 0
	}
	return durationpb.New(d)
}

// copyOf is a copy of *p (nil for nil): a load kept keeps no pointer into
// a request.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
