package deploy

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

// The chart is tested offline: no cluster can be reached here. TestChart renders it with
// the Helm SDK, exactly as `helm install` would, for the default values, every example
// and every file of testdata/, decodes every object strictly into its API type (an
// unknown or misplaced field is an error) and checks the cross-references that a typo
// would break without any schema noticing (checks_test.go, netpol_test.go).
const (
	chartDir    = "helm/switchyard"
	releaseName = "switchyard"
	namespace   = "llm"
	// The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion).
	minKubeVersion = "v1.30.0"
)

// valuesFiles are the cases: "" is the chart's defaults.
func valuesFiles(t *testing.T) []string {
	files := []string{""}
	for _, pattern := range []string{chartDir + "/examples/*.yaml", "testdata/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 4 {
		t.Fatalf("found only %v", files)
	}
	return files
}

func caseName(file string) string {
	if file == "" {
		return "defaults"
	}
	return file
}

func TestChart(t *testing.T) {
	ch := loadChart(t)
	flags := serviceFlags(t)
	docs := readDocs(t)
	for _, file := range valuesFiles(t) {
		t.Run(caseName(file), func(t *testing.T) {
			r := render(t, ch, file)
			checkObjects(t, r)
			checkWorkloads(t, r)
			checkServices(t, r)
			checkProbesAndPorts(t, r)
			checkFlags(t, r, flags)
			checkPeerAddresses(t, r)
			checkReplicaLists(t, r)
			checkFiles(t, r)
			checkIdentities(t, r)
			checkEngines(t, r)
			checkListenAddresses(t, r)
			checkReferences(t, r, docs)
			checkDisruptionAndSpread(t, r)
			checkTermination(t, r)
			checkFrontendServices(t, r)
			checkServiceMonitors(t, r)
			checkNetworkPolicies(t, r)
			lintChart(t, file)
		})
	}
}

// TestChartRefuses: values the chart must refuse with a clear error rather than render
// something that cannot work.
func TestChartRefuses(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		name, values, want string
	}{
		{"a flag the chart sets", "frontend: {flags: {scheduler-addr: x:1}}", "is set by the chart"},
		{"a misspelt key", "fronted: {replicas: 2}", "fronted"},
		// The flags maps name each service's flags (cmd/switchyard's
		// TestChartSchemaNamesEachServicesFlags keeps the lists true).
		{"a misspelt flag", "scheduler: {flags: {polcy: session_aware}}", "polcy"},
		{"a flag of another service", "frontend: {flags: {policy: kv}}", "policy"},
		{"a misspelt shim flag of a pool", "enginePools: [{name: a, shim: {flags: {num-gpu-block: 10}}}]", "num-gpu-block"},
		{"an unknown engine", "enginePools: [{name: a, engine: vlm}]", "engine"},
		{"a real engine without a model", "enginePools: [{name: a, engine: vllm}]", "model is required"},
		{"two pools of one name", "enginePools: [{name: a}, {name: a}]", "two pools are named"},
		{"a pool name that is no DNS label", "enginePools: [{name: A_1}]", "name"},
		{"csi without an issuer", "tls: {mode: secrets, engineShims: {source: csi}}", "issuerRef"},
		{"public TLS from an issuer without dnsNames", "frontend: {publicTLS: {enabled: true, issuerRef: {name: acme}}}", "dnsNames"},
		{"a long full name", "fullnameOverride: " + strings.Repeat("x", 41), "40"},
		{"a full name too long for the flash indexers' StatefulSet", "fullnameOverride: " + strings.Repeat("x", 39), "StatefulSet"},
		{"no scheduler", "scheduler: {replicas: 0}", "replicas"},
		{"no flash indexer", "flashIndexer: {replicas: 0}", "replicas"},
		// Engine pools' objects are <fullname>-<pool>: a pool may not take a name of the
		// control plane's (TestPoolNamesAvoidTheControlPlane tries every one).
		{"pools named like control-plane services", "enginePools: [{name: frontend}, {name: scheduler}]", "control-plane object"},
		{"a pool named like the kv-pool, which is off", "enginePools: [{name: kv-pool}]", "control-plane object"},
		{"a pool named like the frontend's internal Service", "enginePools: [{name: frontend-internal}]", "control-plane object"},
		// Stopping: what Kubernetes refuses, or what would cut a drain short.
		{"a frontend preStop sleep beyond 300 s", "frontend: {preStopSleepSeconds: 301}", "preStopSleepSeconds"},
		{"a shutdown timeout without a unit", "frontend: {flags: {shutdown-timeout: 30}}", "shutdown-timeout"},
		{"a shutdown timeout that is no duration", "scheduler: {flags: {shutdown-timeout: ten seconds}}", "shutdown-timeout"},
		{"an engine's preStop sleep of 0", "enginePools: [{name: a, engine: vllm, model: m, nativeSidecar: false, preStopSleepSeconds: 0}]", "preStopSleepSeconds 0 is shorter than the shim's drain"},
		{"an engine's preStop sleep shorter than the shim's drain", "enginePools: [{name: a, engine: vllm, model: m, nativeSidecar: false, shim: {flags: {shutdown-timeout: 30s}}}]", "shorter than the shim's drain (--shutdown-timeout, 30 s)"},
		{"an engine's preStop sleep that fills the grace period", "enginePools: [{name: a, engine: sglang, model: m, nativeSidecar: false, preStopSleepSeconds: 60}]", "terminationGracePeriodSeconds 60 must be at least preStopSleepSeconds"},
		{"a pool's grace period shorter than the shim's drain", "enginePools: [{name: a, terminationGracePeriodSeconds: 10}]", "terminationGracePeriodSeconds 10 must be at least the shim's drain"},
		{"a native sidecar's grace period shorter than a long drain", "enginePools: [{name: a, engine: vllm, model: m, shim: {flags: {shutdown-timeout: 2m}}}]", "terminationGracePeriodSeconds 60 must be at least the shim's drain (--shutdown-timeout, 120 s)"},
		{"an engine preStop sleep beyond 300 s", "enginePoolDefaults: {preStopSleepSeconds: 301}", "preStopSleepSeconds"},
		// The drain as the service reads it (TestShutdownTimeoutAsGoReadsIt tries more).
		{"a signed shim drain beyond the pool's grace period", "enginePools: [{name: a, shim: {flags: {shutdown-timeout: +56s}}}]", "terminationGracePeriodSeconds 60 must be at least the shim's drain (--shutdown-timeout, 56 s)"},
		{"half a nanosecond (the default drain) beyond an engine's preStop sleep", "enginePools: [{name: a, engine: vllm, model: m, nativeSidecar: false, preStopSleepSeconds: 5, shim: {flags: {shutdown-timeout: 0.5ns}}}]", "preStopSleepSeconds 5 is shorter than the shim's drain (--shutdown-timeout, 10 s)"},
		{"a shutdown timeout longer than Go's longest", "scheduler: {flags: {shutdown-timeout: 3000000h}}", "scheduler.flags.shutdown-timeout: \"3000000h\" is not a duration the service reads: longer than Go's longest, 2562047h47m16.854775807s"},
		// extraEnv beside the computed grace period (TestExtraEnvCannotSetTheDrain tries
		// every place).
		{"the drain in a frontend's extraEnv", "frontend: {extraEnv: [{name: SWITCHYARD_SHUTDOWN_TIMEOUT, value: 2m}]}", "frontend.extraEnv: SWITCHYARD_SHUTDOWN_TIMEOUT"},
		// extraEnv comes last, so a name set before it would win over the chart's value or
		// the flag's without a word.
		{"a chart's variable in extraEnv", "scheduler: {extraEnv: [{name: SWITCHYARD_GRPC_ADDR, value: ':1'}]}", "scheduler.extraEnv: SWITCHYARD_GRPC_ADDR is set by the chart"},
		{"the TLS key in a shim's extraEnv", "enginePools: [{name: a, shim: {extraEnv: [{name: SWITCHYARD_TLS_KEY, value: /k}]}}]", "enginePools[a].shim.extraEnv: SWITCHYARD_TLS_KEY is set by the chart"},
		{"the OTLP endpoint in extraEnv", "otlp: {endpoint: 'http://c:4317'}\nkvhintEmitter: {extraEnv: [{name: OTEL_EXPORTER_OTLP_ENDPOINT, value: 'http://d:4317'}]}", "kvhintEmitter.extraEnv: OTEL_EXPORTER_OTLP_ENDPOINT is set by the chart"},
		{"a flag in extraEnv too", "frontend: {flags: {route-timeout: 1m}, extraEnv: [{name: SWITCHYARD_ROUTE_TIMEOUT, value: 2m}]}", "frontend.extraEnv: SWITCHYARD_ROUTE_TIMEOUT is set by a flag already (frontend.flags"},
		{"a pool defaults' flag in a pool's extraEnv", "enginePoolDefaults: {shim: {flags: {seed: 3}}}\nenginePools: [{name: a, shim: {extraEnv: [{name: SWITCHYARD_SEED, value: '4'}]}}]", "enginePools[a].shim.extraEnv: SWITCHYARD_SEED is set by a flag already (enginePools[a].shim.flags, or the defaults its flags are merged with)"},
		{"a service's log level that slog does not read", "scheduler: {flags: {log-level: verbose}}", "scheduler.flags.log-level: \"verbose\" is no log level"},
		{"an empty log level", "frontend: {flags: {log-level: ''}}", "frontend.flags.log-level: \"\" is no log level"},
		{"a log level slog does not read", "logLevel: WARNING", "logLevel: \"WARNING\" is no log level the services read: DEBUG, INFO, WARN or ERROR, in any case, optionally with a signed offset (INFO+2, debug-4)"},
		{"a log level slog does not read, though every service sets its own", "logLevel: verbose\nfrontend: {flags: {log-level: info}}\nscheduler: {flags: {log-level: info}}\nflashIndexer: {flags: {log-level: info}}\nsessionPrefixIndexer: {flags: {log-level: info}}\nkvhintEmitter: {flags: {log-level: info}}\nenginePoolDefaults: {shim: {flags: {log-level: info}}}", "logLevel: \"verbose\" is no log level"},
		{"the log level in extraEnv", "scheduler: {extraEnv: [{name: SWITCHYARD_LOG_LEVEL, value: DEBUG}]}", "scheduler.extraEnv: SWITCHYARD_LOG_LEVEL is set by the chart from logLevel; set scheduler.flags.log-level for this service's own"},
		{"a name twice in extraEnv", "flashIndexer: {extraEnv: [{name: GOMEMLIMIT, value: 1GiB}, {name: GOMEMLIMIT, value: 2GiB}]}", "flashIndexer.extraEnv: GOMEMLIMIT is listed twice"},
		// The public Service and the IP family.
		{"a frontend Service port of 0", "frontend: {service: {port: 0}}", "port"},
		{"an unknown IP family", "ipFamily: IPv5", "ipFamily"},
		{"topology spread of an unknown kind", "scheduler: {topologySpread: {whenUnsatisfiable: Sometimes}}", "whenUnsatisfiable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tc.values))
			if err != nil {
				t.Fatal(err)
			}
			_, err = renderValues(ch, vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rendering %q: got error %v, want one mentioning %q", tc.values, err, tc.want)
			}
		})
	}
}

// TestPoolNamesAvoidTheControlPlane: an engine pool's objects are named after it, its
// StatefulSet, Service, PodDisruptionBudget and ServiceMonitor <fullname>-<pool>, its
// extraIngress NetworkPolicy <fullname>-<pool>-extra, the podSecrets Secret it mounts
// <fullname>-<pool>-mtls; and a name clash matters between objects of one kind only. So,
// with every optional part of the control plane and of the pool on, the test collects
// the names of both by kind, and tries as a pool name every name the control plane gives
// any object (and every one that would put a pool object on a control-plane object's
// name): it is refused exactly when one of the pool's objects would take the name of a
// control-plane object of its kind, and renders, without a duplicate, otherwise.
func TestPoolNamesAvoidTheControlPlane(t *testing.T) {
	ch := loadChart(t)
	const pool = "pool"
	// Every optional object on: mesh certificates written by cert-manager (first) or
	// yours (tls.mode secrets, the shims' podSecrets Secret).
	values := func(name string) []string {
		common := `
kvPool: {enabled: true, pdb: {enabled: true}}
sessionPrefixIndexer: {pdb: {enabled: true}}
kvhintEmitter: {pdb: {enabled: true}}
serviceMonitor: {enabled: true}
frontend: {publicTLS: {enabled: true, issuerRef: {name: acme}, dnsNames: [api.test]}}
enginePools: [{name: ` + name + `, engine: vllm, model: m, pdb: {enabled: true}, extraIngress: [{from: [{podSelector: {}}]}]}]
`
		return []string{common, common + "tls: {mode: secrets}\n"}
	}
	cp := map[string]map[string]bool{}      // kind -> names after "<fullname>-" of the control plane's objects
	poolObj := map[string]map[string]bool{} // kind -> what follows "<fullname>-<pool>" in the pool's
	var fullname string
	for _, v := range values(pool) {
		r := renderYAML(t, ch, v)
		fullname = r.fullname()
		add := func(kind, name string) {
			rest, ok := strings.CutPrefix(name, fullname+"-")
			if !ok {
				return
			}
			m := cp
			if rest == pool || strings.HasPrefix(rest, pool+"-") {
				m, rest = poolObj, strings.TrimPrefix(rest, pool)
			}
			if m[kind] == nil {
				m[kind] = map[string]bool{}
			}
			m[kind][rest] = true
		}
		for _, o := range r.metas {
			add(o.kind, o.meta.GetName())
		}
		// The Secrets: written by Certificates, or yours, referred to by pods, Issuers and
		// ServiceMonitors.
		for _, c := range r.certificates {
			add("Secret", c.Spec.SecretName)
		}
		for _, i := range r.issuers {
			if i.Spec.CA != nil {
				add("Secret", i.Spec.CA.SecretName)
			}
		}
		for _, p := range r.pods {
			for _, v := range p.spec.Volumes {
				if v.Secret != nil {
					add("Secret", v.Secret.SecretName)
				}
			}
		}
		for _, sm := range r.serviceMonitors {
			for _, ep := range sm.Spec.Endpoints {
				if ep.TLSConfig != nil && ep.TLSConfig.CA.Secret != nil {
					add("Secret", ep.TLSConfig.CA.Secret.Name)
				}
			}
		}
	}
	for kind, sfx := range map[string]string{"StatefulSet": "", "Service": "", "PodDisruptionBudget": "", "ServiceMonitor": "", "NetworkPolicy": "-extra", "Secret": "-mtls"} {
		if !poolObj[kind][sfx] {
			t.Errorf("no %s %s-%s%s rendered: the test's release is not the one it means (the pool's objects: %v)", kind, fullname, pool, sfx, poolObj)
		}
	}
	for _, want := range []string{"frontend", "frontend-internal", "scheduler", "flash-indexer", "session-prefix-indexer", "kvhint-emitter", "kv-pool", "engine-shim"} {
		if !cp["Service"][want] && !cp["NetworkPolicy"][want] {
			t.Errorf("no Service or NetworkPolicy %s-%s rendered: the test's release is not the one it means", fullname, want)
		}
	}
	// clashes: the kinds of the pool's objects that a pool of this name would put on a
	// control-plane object's name.
	clashes := func(name string) []string {
		var out []string
		for kind, sfxs := range poolObj {
			for sfx := range sfxs {
				if cp[kind][name+sfx] {
					out = append(out, kind+" "+fullname+"-"+name+sfx)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	candidates := map[string]bool{}
	for kind, names := range cp {
		for n := range names {
			candidates[n] = true
			for sfx := range poolObj[kind] {
				if base, ok := strings.CutSuffix(n, sfx); ok && sfx != "" && base != "" {
					candidates[base] = true
				}
			}
		}
	}
	// What a release upgraded from before per-kind names may hold: pools named like
	// objects of kinds no pool renders.
	for name, refused := range map[string]bool{"frontend": true, "scheduler": true, "frontend-internal": true, "kv-pool": true,
		"ca": false, "selfsigned": false, "metrics-ca": false, "frontend-public": false, "engine-shim": false, "scheduler-mtls": false} {
		if !candidates[name] {
			t.Errorf("the control plane renders no object %s-%s: the test's release is not the one it means", fullname, name)
		}
		if got := len(clashes(name)) > 0; got != refused {
			t.Errorf("a pool named %q: clashes %v, want a clash %v", name, clashes(name), refused)
		}
	}
	names := make([]string, 0, len(candidates))
	for n := range candidates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			clash := clashes(name)
			for _, v := range values(name) {
				vals, err := chartutil.ReadValues([]byte(v))
				if err != nil {
					t.Fatal(err)
				}
				_, err = renderValues(ch, vals)
				switch {
				case len(clash) > 0 && (err == nil || !strings.Contains(err.Error(), "control-plane object")):
					t.Errorf("a pool named %q (its %s, as the control plane's): got error %v, want a refusal", name, strings.Join(clash, ", "), err)
				case len(clash) == 0 && err != nil:
					t.Errorf("a pool named %q clashes with no control-plane object of its objects' kinds, but: %v", name, err)
				case len(clash) == 0:
					checkObjects(t, renderYAML(t, ch, v))
				}
			}
		})
	}
}

// TestExtraEnvCannotSetTheDrain: every grace period is computed from the service's
// flags.shutdown-timeout, so an extraEnv that sets SWITCHYARD_SHUTDOWN_TIMEOUT (which
// comes after the flags, and wins) would drain past it: it is refused wherever extraEnv
// is accepted, naming the flag to set instead. An engine container's env is the engine's
// (vLLM, SGLang), which reads no Switchyard flag: it may hold the name.
func TestExtraEnvCannotSetTheDrain(t *testing.T) {
	ch := loadChart(t)
	env := "[{name: SWITCHYARD_SHUTDOWN_TIMEOUT, value: 2m}]"
	for _, tc := range []struct{ values, where string }{
		{"frontend: {extraEnv: " + env + "}", "frontend"},
		{"scheduler: {extraEnv: " + env + "}", "scheduler"},
		{"flashIndexer: {extraEnv: " + env + "}", "flashIndexer"},
		{"sessionPrefixIndexer: {extraEnv: " + env + "}", "sessionPrefixIndexer"},
		{"kvhintEmitter: {extraEnv: " + env + "}", "kvhintEmitter"},
		{"kvPool: {enabled: true, extraEnv: " + env + "}", "kvPool"},
		{"enginePools: [{name: a, shim: {extraEnv: " + env + "}}]", "enginePools[a].shim"},
		{"enginePools: [{name: a, engine: vllm, model: m, shim: {extraEnv: " + env + "}}]", "enginePools[a].shim"},
		{"enginePoolDefaults: {shim: {extraEnv: " + env + "}}", "enginePools[sim].shim"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tc.values))
			if err != nil {
				t.Fatal(err)
			}
			_, err = renderValues(ch, vals)
			for _, want := range []string{tc.where + ".extraEnv: SWITCHYARD_SHUTDOWN_TIMEOUT", "set " + tc.where + ".flags.shutdown-timeout instead"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("got error %v, want one saying %q", err, want)
				}
			}
		})
	}
	r := renderYAML(t, ch, "enginePools: [{name: a, engine: vllm, model: m, env: "+env+"}]")
	checkTermination(t, r)
}

// TestShutdownTimeoutAsGoReadsIt: the chart reads a --shutdown-timeout as the service
// does (time.ParseDuration, a value not over 0 meaning servicekit's 10 s): the drain it
// computes, whole nanoseconds rounded up to seconds, is the service's, and what Go
// refuses the chart refuses. Each case's expected drain is checked against Go too.
func TestShutdownTimeoutAsGoReadsIt(t *testing.T) {
	ch := loadChart(t)
	const sleep = 100 // the frontend's grace period is then sleep + drain + graceMargin
	for _, tc := range []struct {
		value string
		drain int64 // 0: refused
	}{
		{"30s", 30}, {"+5s", 5}, {"-1s", 10}, {"-0", 10}, {"+0", 10}, {"0", 10}, {"0s", 10},
		{"0.5ns", 10}, {"1ns", 1}, {"1h2m3.5s", 3724}, {"1.5m", 90}, {".5s", 1}, {"5.s", 5},
		{"1500ms", 2}, {"2000ms", 2}, {"1µs", 1}, {"1μs", 1}, {"1us", 1}, {"0.0000000001h", 1},
		// Whole nanoseconds first: 1.0000000001s is 1 s and 0 ns, not over 1 s.
		{"1.0000000001s", 1}, {"0.9999999999s", 1}, {"1m0.5s", 61}, {"0.25h", 900},
		{"2562047h47m16.854775807s", 9223372037}, {"9223372036854775807ns", 9223372037},
		{"-2562047h47m16.854775808s", 10}, {"-9223372036854775808ns", 10},
		{"30", 0}, {"ten seconds", 0}, {"3000000h", 0}, {"2562047h47m16.854775808s", 0},
		{"9223372036854775808ns", 0}, {"-9223372036854775809ns", 0}, {"99999999999999999999s", 0},
		{"", 0}, {"+", 0}, {"-", 0}, {".s", 0}, {"00", 0}, {"5 s", 0}, {"1d", 0}, {"5sec", 0}, {"1.5", 0},
	} {
		t.Run(tc.value, func(t *testing.T) {
			// What the service does with it.
			goDrain := int64(0)
			if d, err := time.ParseDuration(tc.value); err == nil {
				if d <= 0 {
					d = 10 * time.Second
				}
				goDrain = int64(d / time.Second)
				if d%time.Second != 0 {
					goDrain++
				}
			}
			if goDrain != tc.drain {
				t.Fatalf("the case is wrong: Go reads %q as a drain of %d s (0: refused), the case says %d", tc.value, goDrain, tc.drain)
			}
			values := fmt.Sprintf("frontend: {preStopSleepSeconds: %d, flags: {shutdown-timeout: %q}}", sleep, tc.value)
			vals, err := chartutil.ReadValues([]byte(values))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := renderValues(ch, vals); tc.drain == 0 {
				if err == nil || !strings.Contains(err.Error(), "frontend.flags.shutdown-timeout: "+strconv.Quote(tc.value)+" is not a duration the service reads") {
					t.Errorf("got error %v, want a refusal of %q", err, tc.value)
				}
				return
			} else if err != nil {
				t.Fatalf("a duration Go reads: %v", err)
			}
			r := renderYAML(t, ch, values)
			checkTermination(t, r)
			fe := r.podsOf("frontend")[0]
			if got, want := ptrOr(fe.spec.TerminationGracePeriodSeconds, 30), sleep+tc.drain+graceMargin; got != want {
				t.Errorf("%s: terminationGracePeriodSeconds %d, want %d (a drain of %d s)", fe, got, want, tc.drain)
			}
		})
	}
}

// TestEngineListenAddresses: with ipFamily IPv6 the engines listen on "::" (the kubelet
// probes them at the pod's IPv6 address) and the shim reaches its engine at [::1]; with
// IPv4 the arguments are what they were (SGLang on 0.0.0.0, vLLM on its default) and the
// shim dials 127.0.0.1. checkListenAddresses checks each render besides.
func TestEngineListenAddresses(t *testing.T) {
	ch := loadChart(t)
	pools := "enginePools: [{name: vl, engine: vllm, model: m}, {name: sg, engine: sglang, model: m}, {name: sim, engine: sim}]\n"
	for _, tc := range []struct {
		values               string
		vllmHost, sglangHost string // "": no --host argument
		vllmURL, sglangURL   string
	}{
		{pools, "", "--host=0.0.0.0", "http://127.0.0.1:8000", "http://127.0.0.1:30000"},
		{pools + "ipFamily: IPv4", "", "--host=0.0.0.0", "http://127.0.0.1:8000", "http://127.0.0.1:30000"},
		{pools + "ipFamily: IPv6", "--host=::", "--host=::", "http://[::1]:8000", "http://[::1]:30000"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			r := renderYAML(t, ch, tc.values)
			checkListenAddresses(t, r)
			checkEngines(t, r)
			seen := 0
			for _, p := range r.podsOf("engine-shim") {
				var host, url string
				for _, c := range p.containers() {
					switch c.Name {
					case "engine":
						for _, a := range c.Args {
							if strings.HasPrefix(a, "--host") {
								host = a
							}
						}
					case "engine-shim":
						url = envMap(c)["SWITCHYARD_ENGINE_URL"]
					}
				}
				want := map[string][2]string{"vl": {tc.vllmHost, tc.vllmURL}, "sg": {tc.sglangHost, tc.sglangURL}}[p.pool]
				wantHost, wantURL := want[0], want[1]
				if host != wantHost || url != wantURL {
					t.Errorf("%s: engine %q, shim's engine URL %q; want %q, %q", p, host, url, wantHost, wantURL)
				}
				seen++
			}
			if seen != 3 {
				t.Errorf("%d engine pools rendered, want 3", seen)
			}
		})
	}
}

// TestNotesAdminAPI: NOTES.txt says who reaches the frontend's gRPC admin port as the
// NetworkPolicies render it: no policy at all (networkPolicy.enabled false), one that
// admits no one to it (adminFrom [], the default: the frontend has no gRPC callers), or
// one that admits adminFrom.
func TestNotesAdminAPI(t *testing.T) {
	ch := loadChart(t)
	const (
		open   = "no NetworkPolicy limits who reaches it"
		admin  = "admits the peers of networkPolicy.adminFrom to it, and no one else"
		nobody = "admits no one to it: networkPolicy.adminFrom is empty"
	)
	for _, tc := range []struct{ values, want string }{
		{"", nobody},
		{"networkPolicy: {adminFrom: []}", nobody},
		{"networkPolicy: {adminFrom: [{podSelector: {matchLabels: {app: grpcurl}}}]}", admin},
		{"networkPolicy: {enabled: false}", open},
		{"networkPolicy: {enabled: false, adminFrom: [{podSelector: {matchLabels: {app: grpcurl}}}]}", open},
	} {
		t.Run(tc.values, func(t *testing.T) {
			r := renderYAML(t, ch, tc.values)
			// What the policies do: those selecting the frontend's pods, and their rules
			// reaching its grpc port.
			fe := r.podsOf("frontend")[0]
			policies, peers := 0, 0
			for _, np := range r.netpols {
				if !selectorOf(t, "NetworkPolicy/"+np.Name, &np.Spec.PodSelector).Matches(labels.Set(fe.labels)) {
					continue
				}
				policies++
				for _, rule := range np.Spec.Ingress {
					for _, port := range rule.Ports {
						if port.Port != nil && port.Port.String() == "grpc" {
							peers += len(rule.From)
						}
					}
				}
			}
			truth := map[bool]string{true: admin, false: nobody}[peers > 0]
			if policies == 0 {
				truth = open
			}
			if truth != tc.want {
				t.Fatalf("the case is wrong: %d policies select the frontend, admitting %d peers to its gRPC port", policies, peers)
			}
			for _, say := range []string{open, admin, nobody} {
				if got := strings.Contains(r.notes, say); got != (say == tc.want) {
					t.Errorf("NOTES.txt says %q: %v, want %v:\n%s", say, got, say == tc.want, r.notes)
				}
			}
			if strings.Contains(r.notes, "(admitted from networkPolicy.adminFrom)") {
				t.Errorf("NOTES.txt still says the port is admitted from networkPolicy.adminFrom:\n%s", r.notes)
			}
		})
	}
}

// TestTermination: a stopping frontend sleeps frontend.preStopSleepSeconds (no hook at
// all at 0, which Kubernetes refuses) and then drains for its --shutdown-timeout, and its
// grace period covers both and graceMargin however long they are; every control-plane
// service's grace period covers its own drain. checkTermination checks each render too.
func TestTermination(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		values    string
		component string
		sleep     int64 // 0: no preStop hook
		grace     int64
	}{
		{"", "frontend", 5, 30},
		{"frontend: {preStopSleepSeconds: 0}", "frontend", 0, 30},
		{"frontend: {preStopSleepSeconds: 25}", "frontend", 25, 40},
		{"frontend: {preStopSleepSeconds: 300}", "frontend", 300, 315},
		{"frontend: {preStopSleepSeconds: 20, flags: {shutdown-timeout: 1m30s}}", "frontend", 20, 115},
		{"frontend: {flags: {shutdown-timeout: 1500ms}}", "frontend", 5, 30},
		{"scheduler: {flags: {shutdown-timeout: 40s}}", "scheduler", 0, 45},
		{"", "scheduler", 0, 30},
	} {
		t.Run(tc.component+" "+tc.values, func(t *testing.T) {
			r := renderYAML(t, ch, tc.values)
			checkTermination(t, r)
			pods := r.podsOf(tc.component)
			if len(pods) != 1 {
				t.Fatalf("%d workloads of %s", len(pods), tc.component)
			}
			p := pods[0]
			if got := ptrOr(p.spec.TerminationGracePeriodSeconds, 30); got != tc.grace {
				t.Errorf("%s: terminationGracePeriodSeconds %d, want %d", p, got, tc.grace)
			}
			c := &p.spec.Containers[0]
			if got := preStopSleep(c); got != tc.sleep {
				t.Errorf("%s: preStop sleep %d s, want %d", p, got, tc.sleep)
			}
			if tc.sleep == 0 && c.Lifecycle != nil {
				t.Errorf("%s: a lifecycle %+v without a sleep (Kubernetes refuses a sleep of 0)", p, c.Lifecycle)
			}
		})
	}
}

// TestFrontendPublicService: with a LoadBalancer the public Service publishes the HTTP
// port alone, on frontend.service.port; the gRPC admin port is on the ClusterIP Service
// <fullname>-frontend-internal, which the ServiceMonitor leaves out.
func TestFrontendPublicService(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		values string
		port   int32
	}{
		{"frontend: {service: {type: LoadBalancer}}", 8000},
		{"frontend: {service: {type: LoadBalancer, port: 443}, publicTLS: {enabled: true}}\nserviceMonitor: {enabled: true}", 443},
		{"frontend: {service: {type: NodePort, port: 8080}}", 8080},
	} {
		t.Run(tc.values, func(t *testing.T) {
			r := renderYAML(t, ch, tc.values)
			checkFrontendServices(t, r)
			pub := r.service(r.fullname() + "-frontend")
			if pub == nil {
				t.Fatal("no Service " + r.fullname() + "-frontend")
			}
			if len(pub.Spec.Ports) != 1 || pub.Spec.Ports[0].Port != tc.port || pub.Spec.Ports[0].TargetPort.String() != "http" {
				t.Errorf("Service/%s: ports %+v, want the http port alone, on %d", pub.Name, pub.Spec.Ports, tc.port)
			}
			in := r.service(r.fullname() + "-frontend-internal")
			if in == nil || in.Spec.Type != corev1.ServiceTypeClusterIP || len(in.Spec.Ports) != 1 || in.Spec.Ports[0].Name != "grpc" || in.Spec.Ports[0].Port != 8001 {
				t.Errorf("the frontend's gRPC port: %+v, want ClusterIP Service %s-frontend-internal with port grpc 8001", in, r.fullname())
			}
			for _, sm := range r.serviceMonitors {
				sel := selectorOf(t, "ServiceMonitor/"+sm.Name, &sm.Spec.Selector)
				if in != nil && sel.Matches(labels.Set(in.Labels)) {
					t.Errorf("ServiceMonitor/%s selects the internal Service %s, which has no http port", sm.Name, in.Name)
				}
			}
		})
	}
}

// TestNotesFrontendURL: NOTES.txt gives the frontend's URL as the chart serves it: an
// https URL on the public name and the Service's port (none for 443) with publicTLS, and
// a port-forward to the Service's port.
func TestNotesFrontendURL(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"", []string{"port-forward svc/switchyard-frontend 8000:8000", "curl -s http://localhost:8000/v1/models", "ANTHROPIC_BASE_URL=http://localhost:8000 "}},
		{"frontend: {service: {port: 9000}}", []string{"port-forward svc/switchyard-frontend 8000:9000", "ANTHROPIC_BASE_URL=http://localhost:8000 "}},
		{"frontend: {publicTLS: {enabled: true, issuerRef: {name: acme}, dnsNames: [llm.example.com]}}",
			[]string{"port-forward svc/switchyard-frontend 8000:8000", "https://llm.example.com:8000/v1/models", "ANTHROPIC_BASE_URL=https://llm.example.com:8000 "}},
		{"frontend: {service: {port: 443}, publicTLS: {enabled: true, issuerRef: {name: acme}, dnsNames: [llm.example.com]}}",
			[]string{"port-forward svc/switchyard-frontend 8000:443", "ANTHROPIC_BASE_URL=https://llm.example.com "}},
		{"frontend: {service: {port: 8443}, publicTLS: {enabled: true, secretName: cert}}",
			[]string{"port-forward svc/switchyard-frontend 8000:8443", "curl -sk https://localhost:8000/v1/models", "ANTHROPIC_BASE_URL=https://<your public host>:8443 "}},
		// With keys the model list needs one, as the inference APIs do.
		{"frontend: {apiKeys: {existingSecret: keys}}", []string{"curl -s -H 'x-api-key: <your key>' http://localhost:8000/v1/models", "ANTHROPIC_AUTH_TOKEN=<your key>"}},
	} {
		t.Run(tc.values, func(t *testing.T) {
			r := renderYAML(t, ch, tc.values)
			for _, w := range tc.want {
				if !strings.Contains(r.notes, w) {
					t.Errorf("NOTES.txt lacks %q:\n%s", w, r.notes)
				}
			}
		})
	}
}

// TestShimAdvertiseAddr: a shim advertises its pod's IP and gRPC port as an address
// gRPC can dial on either IP family: ipFamily IPv6 brackets the IP.
func TestShimAdvertiseAddr(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct{ values, ip string }{
		{"", "10.1.2.3"},
		{"ipFamily: IPv4", "10.1.2.3"},
		{"ipFamily: IPv6", "fd00::5"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			r := renderYAML(t, ch, tc.values)
			shims := r.podsOf("engine-shim")
			if len(shims) == 0 {
				t.Fatal("no engine pool rendered")
			}
			for _, p := range shims {
				adv, _ := envVar(&p.spec.Containers[0], "SWITCHYARD_ADVERTISE_ADDR")
				addr := strings.ReplaceAll(adv.Value, "$(POD_IP)", tc.ip)
				host, port, err := net.SplitHostPort(addr)
				if err != nil || host != tc.ip || port != "9500" {
					t.Errorf("%s: SWITCHYARD_ADVERTISE_ADDR=%q is %q on a pod of IP %s: host %q, port %q, error %v", p, adv.Value, addr, tc.ip, host, port, err)
				}
			}
		})
	}
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, minKubeVersion) {
		t.Fatalf("Chart.yaml kubeVersion %q excludes %s, the version the chart is tested for", ch.Metadata.KubeVersion, minKubeVersion)
	}
	return ch
}

func kubeVersion() *chartutil.KubeVersion {
	kv, err := chartutil.ParseKubeVersion(minKubeVersion)
	if err != nil {
		panic(err)
	}
	return kv
}

func capabilities() *chartutil.Capabilities {
	return &chartutil.Capabilities{KubeVersion: *kubeVersion(), APIVersions: chartutil.DefaultVersionSet, HelmVersion: chartutil.DefaultCapabilities.HelmVersion}
}

// renderValues renders the chart as `helm install` does (schema validation included),
// in strict mode: a template reading a value that is not there is an error.
func renderValues(ch *chart.Chart, vals map[string]any) (map[string]string, error) {
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, Revision: 1, IsInstall: true}, capabilities())
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(ch, rv)
}

func lintChart(t *testing.T, file string) {
	l := lint.AllWithKubeVersion(chartDir, readValues(t, file), namespace, kubeVersion())
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// readValues reads a case's values file ("": none, the chart's defaults).
func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A rendered release, by kind.
type release struct {
	file   string
	values map[string]any // the values the templates saw (defaults coalesced)

	deployments     []*appsv1.Deployment
	statefulSets    []*appsv1.StatefulSet
	services        []*corev1.Service
	serviceAccounts []*corev1.ServiceAccount
	secrets         []*corev1.Secret
	configMaps      []*corev1.ConfigMap
	pdbs            []*policyv1.PodDisruptionBudget
	netpols         []*networkingv1.NetworkPolicy
	serviceMonitors []*monitoringv1.ServiceMonitor
	certificates    []*certificate
	issuers         []*issuer

	pods  []*pod   // the pod templates of the workloads
	notes string   // NOTES.txt
	metas []object // every object, for name and namespace checks
}

type object struct {
	kind string
	meta metav1.Object
}

// pod is one workload's pod template.
type pod struct {
	workload  string // Kind/name
	component string // app.kubernetes.io/component
	pool      string // switchyard.dev/pool, engine pods only
	labels    map[string]string
	spec      *corev1.PodSpec
	claims    []corev1.PersistentVolumeClaim // a StatefulSet's volumeClaimTemplates
}

func (p *pod) String() string { return p.workload }

// containers are the pod's init and regular containers.
func (p *pod) containers() []*corev1.Container {
	var cs []*corev1.Container
	for i := range p.spec.InitContainers {
		cs = append(cs, &p.spec.InitContainers[i])
	}
	for i := range p.spec.Containers {
		cs = append(cs, &p.spec.Containers[i])
	}
	return cs
}

// shimAndEngine are an engine pod's engine-shim and engine containers (nil
// where the pod has none), wherever the engine runs (init or main).
func (p *pod) shimAndEngine() (shim, eng *corev1.Container) {
	for _, c := range p.containers() {
		switch c.Name {
		case "engine-shim":
			shim = c
		case "engine":
			eng = c
		}
	}
	return shim, eng
}

func render(t *testing.T, ch *chart.Chart, file string) *release {
	t.Helper()
	return renderRelease(t, ch, file, readValues(t, file))
}

// renderYAML renders the chart for values given inline, as a test case's own.
func renderYAML(t *testing.T, ch *chart.Chart, values string) *release {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	return renderRelease(t, ch, "values "+values, vals)
}

// renderRelease renders the chart for vals (file names them in messages) and decodes it.
func renderRelease(t *testing.T, ch *chart.Chart, file string, vals map[string]any) *release {
	t.Helper()
	out, err := renderValues(ch, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	coalesced, err := chartutil.CoalesceValues(ch, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := &release{file: file, values: coalesced}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = out[name]
			continue
		}
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		docs := releaseutil.SplitManifests(out[name])
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := r.decode(docs[k]); err != nil {
				t.Errorf("%s: %v\n%s", name, err, docs[k])
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return r
}

// kinds are the objects the chart may render, by "apiVersion kind": each makes a new
// object of its type, kept in the release's list of that kind.
var kinds = map[string]func(r *release) metav1.Object{
	"apps/v1 Deployment":                      func(r *release) metav1.Object { return keep(&r.deployments) },
	"apps/v1 StatefulSet":                     func(r *release) metav1.Object { return keep(&r.statefulSets) },
	"v1 Service":                              func(r *release) metav1.Object { return keep(&r.services) },
	"v1 ServiceAccount":                       func(r *release) metav1.Object { return keep(&r.serviceAccounts) },
	"v1 Secret":                               func(r *release) metav1.Object { return keep(&r.secrets) },
	"v1 ConfigMap":                            func(r *release) metav1.Object { return keep(&r.configMaps) },
	"policy/v1 PodDisruptionBudget":           func(r *release) metav1.Object { return keep(&r.pdbs) },
	"networking.k8s.io/v1 NetworkPolicy":      func(r *release) metav1.Object { return keep(&r.netpols) },
	"monitoring.coreos.com/v1 ServiceMonitor": func(r *release) metav1.Object { return keep(&r.serviceMonitors) },
	"cert-manager.io/v1 Certificate":          func(r *release) metav1.Object { return keep(&r.certificates) },
	"cert-manager.io/v1 Issuer":               func(r *release) metav1.Object { return keep(&r.issuers) },
}

// keep appends a new, empty object to list and returns it.
func keep[T any, P interface {
	*T
	metav1.Object
}](list *[]P) P {
	o := P(new(T))
	*list = append(*list, o)
	return o
}

// decode decodes one document strictly into its type: unknown fields, duplicate keys
// and values of the wrong type are errors.
func (r *release) decode(doc string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return err
	}
	newObject, ok := kinds[tm.APIVersion+" "+tm.Kind]
	if !ok {
		return fmt.Errorf("a %s %s: the test knows no type for it (add one to kinds)", tm.APIVersion, tm.Kind)
	}
	target := newObject(r)
	if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	r.metas = append(r.metas, object{kind: tm.Kind, meta: target})
	switch o := target.(type) {
	case *appsv1.Deployment:
		r.pods = append(r.pods, newPod("Deployment/"+o.Name, &o.Spec.Template, nil))
	case *appsv1.StatefulSet:
		r.pods = append(r.pods, newPod("StatefulSet/"+o.Name, &o.Spec.Template, o.Spec.VolumeClaimTemplates))
	case *certificate:
		return o.validate()
	case *issuer:
		return o.validate()
	}
	return nil
}

func newPod(workload string, tpl *corev1.PodTemplateSpec, claims []corev1.PersistentVolumeClaim) *pod {
	return &pod{
		workload:  workload,
		component: tpl.Labels["app.kubernetes.io/component"],
		pool:      tpl.Labels["switchyard.dev/pool"],
		labels:    tpl.Labels,
		spec:      &tpl.Spec,
		claims:    claims,
	}
}

// value reads a dotted path of the coalesced values ("tls.mode").
func (r *release) value(path string) any {
	var v any = r.values
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (r *release) str(path string) string {
	s, _ := r.value(path).(string)
	return s
}

func (r *release) podsOf(component string) []*pod {
	var ps []*pod
	for _, p := range r.pods {
		if p.component == component {
			ps = append(ps, p)
		}
	}
	return ps
}

func TestMain(m *testing.M) {
	code := m.Run()
	cleanupFlags()
	os.Exit(code)
}

// logLevel is every service's log level; a service's own flags.log-level
// sets its alone.
func TestLogLevelPerService(t *testing.T) {
	r := renderYAML(t, loadChart(t), "logLevel: WARN\nscheduler: {flags: {log-level: DEBUG}}")
	seen := 0
	for _, p := range r.pods {
		for _, c := range p.containers() {
			env := envMap(c)
			level, ok := env["SWITCHYARD_LOG_LEVEL"]
			if !ok {
				continue // an engine's container
			}
			want := "WARN"
			if p.component == "scheduler" {
				want, seen = "DEBUG", seen+1
			}
			if level != want {
				t.Errorf("%s/%s: SWITCHYARD_LOG_LEVEL=%s, want %s", p, c.Name, level, want)
			}
		}
	}
	if seen == 0 {
		t.Error("no scheduler container rendered")
	}
}

// TestLogLevelAsSlogReadsIt: the chart reads a log level as the services do
// (--log-level, SWITCHYARD_LOG_LEVEL: slog.Level.UnmarshalText), in logLevel and in a
// service's flags.log-level alike: what slog reads is rendered as given, in any case
// and with any offset; what slog refuses (WARNING, an offset out of int's range) the
// chart refuses, naming the value and the spellings it would take. Each case's verdict
// is checked against slog too.
func TestLogLevelAsSlogReadsIt(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"DEBUG", true}, {"INFO", true}, {"WARN", true}, {"ERROR", true},
		{"debug", true}, {"info", true}, {"warn", true}, {"error", true}, {"Info", true}, {"wArN", true},
		{"INFO+2", true}, {"debug-4", true}, {"WARN+0", true}, {"error-0", true}, {"info+007", true},
		// strings.ToUpper makes the dotless ı an I.
		{"ınfo", true},
		{"DEBUG+9223372036854775807", true}, {"debug-9223372036854775808", true}, {"info+0009223372036854775807", true},
		{"WARNING", false}, {"warning", false}, {"verbose", false}, {"trace", false}, {"fatal", false},
		{"", false}, {" info", false}, {"info ", false}, {"in fo", false}, {"İnfo", false}, {"4", false},
		{"INFO+", false}, {"INFO-", false}, {"info+-1", false}, {"info++1", false}, {"info+1.5", false}, {"INFO_1", false},
		{"debug+9223372036854775808", false}, {"debug-9223372036854775809", false}, {"info+99999999999999999999", false},
	} {
		t.Run(tc.value, func(t *testing.T) {
			var l slog.Level
			if slogOK := l.UnmarshalText([]byte(tc.value)) == nil; slogOK != tc.ok {
				t.Fatalf("the case is wrong: slog reads %q: %v, the case says %v", tc.value, slogOK, tc.ok)
			}
			for _, v := range []struct{ values, where string }{
				{fmt.Sprintf("logLevel: %q", tc.value), "logLevel"},
				{fmt.Sprintf("scheduler: {flags: {log-level: %q}}", tc.value), "scheduler.flags.log-level"},
			} {
				vals, err := chartutil.ReadValues([]byte(v.values))
				if err != nil {
					t.Fatal(err)
				}
				_, err = renderValues(ch, vals)
				if !tc.ok {
					want := v.where + ": " + strconv.Quote(tc.value) + " is no log level the services read: "
					if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "DEBUG, INFO, WARN or ERROR, in any case") {
						t.Errorf("%s: got error %v, want a refusal starting %q and naming the spellings", v.values, err, want)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: a level slog reads: %v", v.values, err)
					continue
				}
				r := renderYAML(t, ch, v.values)
				seen := 0
				r.eachSwitchyardContainer(func(p *pod, c *corev1.Container, _, where string) {
					want := "INFO"
					if v.where == "logLevel" || p.component == "scheduler" {
						want = tc.value
					}
					if p.component == "scheduler" {
						seen++
					}
					if got := envMap(c)["SWITCHYARD_LOG_LEVEL"]; got != want {
						t.Errorf("%s: %s: SWITCHYARD_LOG_LEVEL=%q, want %q", v.values, where, got, want)
					}
				})
				if seen == 0 {
					t.Errorf("%s: no scheduler container rendered", v.values)
				}
			}
		})
	}
}
