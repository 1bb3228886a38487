package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The cross-reference checks: what a typo in one template would break in another
// without any schema noticing.

// checkObjects: names are what the API server accepts, unique per kind, in the
// release's namespace.
func checkObjects(t *testing.T, r *release) {
	seen := map[string]bool{}
	for _, o := range r.metas {
		id := o.kind + "/" + o.meta.GetName()
		if seen[id] {
			t.Errorf("%s is rendered twice", id)
		}
		seen[id] = true
		if o.meta.GetNamespace() != namespace {
			t.Errorf("%s: namespace %q, want the release's (%s)", id, o.meta.GetNamespace(), namespace)
		}
		var errs []string
		switch o.kind {
		case "Service":
			errs = validation.IsDNS1035Label(o.meta.GetName())
		case "StatefulSet":
			// Its pods' controller-revision-hash label holds the name and a hash.
			errs = validation.IsDNS1123Label(o.meta.GetName())
			if len(o.meta.GetName()) > 52 {
				errs = append(errs, "longer than 52 characters")
			}
		default:
			errs = validation.IsDNS1123Subdomain(o.meta.GetName())
		}
		for _, e := range errs {
			t.Errorf("%s: name: %s", id, e)
		}
		checkLabels(t, id, o.meta.GetLabels())
	}
	for _, p := range r.pods {
		checkLabels(t, p.workload+" pods", p.labels)
	}
}

func checkLabels(t *testing.T, where string, l map[string]string) {
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			t.Errorf("%s: label %q: %s", where, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			t.Errorf("%s: label %s=%q: %s", where, k, v, e)
		}
	}
}

func selectorOf(t *testing.T, where string, ls *metav1.LabelSelector) labels.Selector {
	if ls == nil {
		t.Errorf("%s: no selector", where)
		return labels.Nothing()
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return labels.Nothing()
	}
	if s.Empty() {
		t.Errorf("%s: an empty selector selects everything", where)
	}
	return s
}

func (r *release) selectPods(sel labels.Selector) []*pod {
	var ps []*pod
	for _, p := range r.pods {
		if sel.Matches(labels.Set(p.labels)) {
			ps = append(ps, p)
		}
	}
	return ps
}

// checkWorkloads: each workload's selector selects its own pods and no other workload's;
// every pod has a component; Switchyard containers run their own service's image.
func checkWorkloads(t *testing.T, r *release) {
	type wl struct {
		name string
		sel  *metav1.LabelSelector
	}
	var wls []wl
	for _, d := range r.deployments {
		wls = append(wls, wl{"Deployment/" + d.Name, d.Spec.Selector})
	}
	for _, s := range r.statefulSets {
		wls = append(wls, wl{"StatefulSet/" + s.Name, s.Spec.Selector})
		if svc := r.service(s.Spec.ServiceName); svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("StatefulSet/%s: serviceName %q is no headless Service of the release", s.Name, s.Spec.ServiceName)
		}
	}
	for _, w := range wls {
		got := r.selectPods(selectorOf(t, w.name, w.sel))
		if len(got) != 1 || got[0].workload != w.name {
			t.Errorf("%s: its selector selects the pods of %v, want its own only", w.name, got)
		}
	}
	if len(r.pods) == 0 {
		t.Fatal("no workloads rendered")
	}
	for _, p := range r.pods {
		if p.component == "" {
			t.Errorf("%s: pods have no app.kubernetes.io/component", p)
		}
		for _, c := range p.containers() {
			svc, ok := switchyardService(r, c)
			if ok && c.Name != svc {
				t.Errorf("%s: container %q runs the %s image", p, c.Name, svc)
			}
			if ok && svc != p.component {
				t.Errorf("%s: a %s container in pods of component %s", p, svc, p.component)
			}
		}
	}
	for _, want := range []string{"frontend", "scheduler", "flash-indexer", "session-prefix-indexer", "kvhint-emitter"} {
		if len(r.podsOf(want)) != 1 {
			t.Errorf("%d workloads of %s, want 1", len(r.podsOf(want)), want)
		}
	}
}

// switchyardService is the service a container's image is (<prefix>/<service>:<tag>).
func switchyardService(r *release, c *corev1.Container) (string, bool) {
	prefix := r.str("image.repositoryPrefix")
	repo, _, _ := strings.Cut(c.Image, ":")
	for _, s := range services {
		if repo == prefix+"/"+s || strings.HasSuffix(repo, "/"+prefix+"/"+s) {
			return s, true
		}
	}
	return "", false
}

// eachSwitchyardContainer calls f for every container of the release that runs a
// Switchyard image, pod by pod, with its service and how messages name it.
func (r *release) eachSwitchyardContainer(f func(p *pod, c *corev1.Container, svc, where string)) {
	for _, p := range r.pods {
		for _, c := range p.containers() {
			if svc, ok := switchyardService(r, c); ok {
				f(p, c, svc, p.nameOf(c))
			}
		}
	}
}

// nameOf names one of the pod's containers in messages.
func (p *pod) nameOf(c *corev1.Container) string { return fmt.Sprintf("%s container %s", p, c.Name) }

func (r *release) service(name string) *corev1.Service {
	for _, s := range r.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// containerPort resolves a port (name or number) to a port of the container.
func containerPort(c *corev1.Container, port intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, p := range c.Ports {
		if port.Type == intstr.String && p.Name == port.StrVal || port.Type == intstr.Int && p.ContainerPort == port.IntVal {
			return p, true
		}
	}
	return corev1.ContainerPort{}, false
}

// podPort resolves a port in any container of the pod.
func podPort(p *pod, port intstr.IntOrString) (corev1.ContainerPort, *corev1.Container, bool) {
	for _, c := range p.containers() {
		if cp, ok := containerPort(c, port); ok {
			return cp, c, true
		}
	}
	return corev1.ContainerPort{}, nil, false
}

// checkServices: every Service selects pods that exist, all of one component (and one
// pool), and each of its ports is a container port of every pod it selects.
func checkServices(t *testing.T, r *release) {
	for _, s := range r.services {
		id := "Service/" + s.Name
		sel := labels.SelectorFromSet(s.Spec.Selector)
		if len(s.Spec.Selector) == 0 {
			t.Errorf("%s: no selector", id)
			continue
		}
		pods := r.selectPods(sel)
		if len(pods) == 0 {
			t.Errorf("%s: selects no pod of the release (selector %v)", id, s.Spec.Selector)
		}
		for _, p := range pods {
			if p.component != pods[0].component || p.pool != pods[0].pool {
				t.Errorf("%s: selects pods of %s and of %s", id, pods[0], p)
			}
		}
		names := map[string]bool{}
		for _, sp := range s.Spec.Ports {
			if names[sp.Name] {
				t.Errorf("%s: two ports named %q", id, sp.Name)
			}
			names[sp.Name] = true
			for _, p := range pods {
				cp, _, ok := podPort(p, sp.TargetPort)
				if !ok {
					t.Errorf("%s: port %s's targetPort %s is no container port of %s", id, sp.Name, sp.TargetPort.String(), p)
					continue
				}
				if cp.Protocol != sp.Protocol {
					t.Errorf("%s: port %s is %s, the container port %s", id, sp.Name, sp.Protocol, cp.Protocol)
				}
			}
		}
	}
}

var listenFlags = map[string]string{"SWITCHYARD_GRPC_ADDR": "grpc", "SWITCHYARD_HTTP_ADDR": "http", "SWITCHYARD_HEALTH_ADDR": "health"}

// checkProbesAndPorts: container ports are unique and valid; every probe's port is a
// port of its own container; a Switchyard container listens where its ports say, and
// its probes are native gRPC probes of its plaintext health listener; every volume
// mount names a volume of the pod.
func checkProbesAndPorts(t *testing.T, r *release) {
	for _, p := range r.pods {
		names, numbers := map[string]bool{}, map[int32]bool{}
		volumes := map[string]bool{}
		for _, v := range p.spec.Volumes {
			volumes[v.Name] = true
		}
		for _, c := range p.claims {
			volumes[c.Name] = true
		}
		for _, c := range p.containers() {
			where := p.nameOf(c)
			for _, cp := range c.Ports {
				if names[cp.Name] || numbers[cp.ContainerPort] {
					t.Errorf("%s: port %s/%d is declared twice in the pod", where, cp.Name, cp.ContainerPort)
				}
				names[cp.Name], numbers[cp.ContainerPort] = true, true
				for _, e := range validation.IsValidPortName(cp.Name) {
					t.Errorf("%s: port name %q: %s", where, cp.Name, e)
				}
			}
			for kind, pr := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if pr == nil {
					continue
				}
				var port intstr.IntOrString
				switch {
				case pr.GRPC != nil:
					port = intstr.FromInt32(pr.GRPC.Port)
				case pr.HTTPGet != nil:
					port = pr.HTTPGet.Port
				case pr.TCPSocket != nil:
					port = pr.TCPSocket.Port
				default:
					continue
				}
				if _, ok := containerPort(c, port); !ok {
					t.Errorf("%s: %s probe port %s is none of its container ports", where, kind, port.String())
				}
			}
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					t.Errorf("%s: mounts volume %q, which the pod does not have", where, m.Name)
				}
			}
			if _, ok := switchyardService(r, c); !ok {
				continue
			}
			env := envMap(c)
			for name, portName := range listenFlags {
				cp, ok := containerPort(c, intstr.FromString(portName))
				if !ok {
					t.Errorf("%s: no container port named %s", where, portName)
					continue
				}
				if got, want := env[name], fmt.Sprintf(":%d", cp.ContainerPort); got != want {
					t.Errorf("%s: %s=%q but its %s port is %d", where, name, got, portName, cp.ContainerPort)
				}
			}
			health, _ := containerPort(c, intstr.FromString("health"))
			for kind, pr := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if pr == nil || pr.GRPC == nil || pr.GRPC.Port != health.ContainerPort {
					t.Errorf("%s: the %s probe must be a gRPC probe of the health port %d (the kubelet speaks no TLS)", where, kind, health.ContainerPort)
				}
			}
		}
	}
}

func envMap(c *corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func envVar(c *corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

var fieldPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.podIP", "status.podIPs"}

// checkFlags: every SWITCHYARD_* variable of a Switchyard container is a flag of that
// service's binary (an unknown one is silently ignored by servicekit.EnvFlags); no
// variable is set twice; every $(VAR) refers to a variable defined before it (Kubernetes
// leaves an unknown reference as it is); TLS is on, or plaintext is explicit.
func checkFlags(t *testing.T, r *release, flags map[string]map[string]bool) {
	mode := r.str("tls.mode")
	for _, p := range r.pods {
		for _, c := range p.containers() {
			where := p.nameOf(c)
			defined := map[string]bool{}
			for _, e := range c.Env {
				if defined[e.Name] {
					t.Errorf("%s: %s is set twice", where, e.Name)
				}
				for _, m := range varRef.FindAllStringSubmatch(e.Value, -1) {
					if !defined[m[1]] {
						t.Errorf("%s: %s refers to $(%s), which is not defined before it", where, e.Name, m[1])
					}
				}
				defined[e.Name] = true
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && !slices.Contains(fieldPaths, e.ValueFrom.FieldRef.FieldPath) {
					t.Errorf("%s: %s: fieldRef %q is no downward API field", where, e.Name, e.ValueFrom.FieldRef.FieldPath)
				}
			}
			for _, s := range append(slices.Clone(c.Command), c.Args...) {
				for _, m := range varRef.FindAllStringSubmatch(s, -1) {
					if !defined[m[1]] {
						t.Errorf("%s: argument %q refers to $(%s), which the container does not define", where, s, m[1])
					}
				}
			}
			svc, ok := switchyardService(r, c)
			if !ok {
				continue
			}
			known := map[string]string{}
			for f := range flags[svc] {
				known[envName(f)] = f
			}
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "SWITCHYARD_") && known[e.Name] == "" {
					t.Errorf("%s: %s is no flag of the %s binary (it would be ignored)", where, e.Name, svc)
				}
			}
			for _, a := range c.Args {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !flags[svc][name] {
					t.Errorf("%s: argument %q is no flag of %s", where, a, svc)
				}
			}
			env := envMap(c)
			switch {
			case mode == "none":
				if env["SWITCHYARD_INSECURE"] != "true" || env["SWITCHYARD_TLS_CERT"] != "" {
					t.Errorf("%s: tls.mode none needs SWITCHYARD_INSECURE=true and no certificate", where)
				}
			default:
				for _, v := range []string{"SWITCHYARD_TLS_CERT", "SWITCHYARD_TLS_KEY", "SWITCHYARD_TLS_CA"} {
					if env[v] == "" {
						t.Errorf("%s: tls.mode %s but %s is not set", where, mode, v)
					}
				}
				if _, set := env["SWITCHYARD_INSECURE"]; set {
					t.Errorf("%s: SWITCHYARD_INSECURE with TLS on", where)
				}
				if got := env["SWITCHYARD_TRUST_DOMAIN"]; got != r.str("tls.trustDomain") {
					t.Errorf("%s: trust domain %q, want tls.trustDomain %q", where, got, r.str("tls.trustDomain"))
				}
			}
			if svc == "engine-shim" {
				checkWorkerIdentity(t, where, c, r.str("ipFamily"))
			}
		}
	}
}

// checkWorkerIdentity: a shim registers under its pod's name and address, the pod's IP
// bracketed on an IPv6 cluster (ipFamily): an address gRPC can dial.
func checkWorkerIdentity(t *testing.T, where string, c *corev1.Container, family string) {
	id, _ := envVar(c, "SWITCHYARD_WORKER_ID")
	if id.ValueFrom == nil || id.ValueFrom.FieldRef == nil || id.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("%s: SWITCHYARD_WORKER_ID must be the pod's name (fieldRef metadata.name)", where)
	}
	adv, _ := envVar(c, "SWITCHYARD_ADVERTISE_ADDR")
	form, sample := `^\$\(([A-Z_]+)\):(\d+)$`, "10.1.2.3"
	if family == "IPv6" {
		form, sample = `^\[\$\(([A-Z_]+)\)\]:(\d+)$`, "fd00::5"
	}
	m := regexp.MustCompile(form).FindStringSubmatch(adv.Value)
	if m == nil {
		t.Errorf("%s: SWITCHYARD_ADVERTISE_ADDR %q is not the %s form of $(POD_IP):<grpc port> (%s)", where, adv.Value, family, form)
		return
	}
	if host, _, err := net.SplitHostPort(strings.ReplaceAll(adv.Value, "$("+m[1]+")", sample)); err != nil || host != sample {
		t.Errorf("%s: SWITCHYARD_ADVERTISE_ADDR %q on a pod of IP %s: host %q, %v", where, adv.Value, sample, host, err)
	}
	ip, _ := envVar(c, m[1])
	if ip.ValueFrom == nil || ip.ValueFrom.FieldRef == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("%s: SWITCHYARD_ADVERTISE_ADDR's $(%s) must be the pod's IP (fieldRef status.podIP)", where, m[1])
	}
	grpc, _ := containerPort(c, intstr.FromString("grpc"))
	if m[2] != strconv.Itoa(int(grpc.ContainerPort)) {
		t.Errorf("%s: advertises port %s, listens for gRPC on %d", where, m[2], grpc.ContainerPort)
	}
}

// checkPeerAddresses: every address of every *-addr flag (a comma-separated list)
// names a Service of the release, or a pod of a StatefulSet by its DNS name under the
// StatefulSet's headless Service, on its gRPC port, whose pods are the service the flag
// is for; and every caller that must be told where its callee is (calls,
// netpol_test.go) is.
func checkPeerAddresses(t *testing.T, r *release) {
	r.eachSwitchyardContainer(func(_ *pod, c *corev1.Container, svc, where string) {
		env := envMap(c)
		for _, call := range calls {
			if call.from != svc || call.flag == "" {
				continue
			}
			list, set := env[envName(call.flag)]
			if !set {
				if !call.optional && len(r.podsOf(call.to)) > 0 {
					t.Errorf("%s: --%s is not set, so it would dial its default, not the release's %s", where, call.flag, call.to)
				}
				continue
			}
			for _, addr := range strings.Split(list, ",") {
				r.checkPeerAddress(t, where, call, addr)
			}
		}
	})
}

// checkPeerAddress checks one address of a call's flag.
func (r *release) checkPeerAddress(t *testing.T, where string, call call, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: --%s address %q: %v", where, call.flag, addr, err)
		return
	}
	name := strings.TrimSuffix(host, "."+namespace+".svc")
	var targets []*pod
	s := r.service(name)
	if podName, svcName, ok := strings.Cut(name, "."); ok {
		// <pod>.<headless Service>: a pod of the StatefulSet that Service governs.
		s = r.service(svcName)
		sts := r.statefulSetOf(svcName)
		if s == nil || sts == nil || s.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s: --%s address %q: %s is no headless Service of a StatefulSet of the release", where, call.flag, addr, svcName)
			return
		}
		ordinal, err := strconv.Atoi(strings.TrimPrefix(podName, sts.Name+"-"))
		if !strings.HasPrefix(podName, sts.Name+"-") || err != nil || ordinal < 0 || ordinal >= int(ptrOr(sts.Spec.Replicas, 1)) {
			t.Errorf("%s: --%s address %q: %s is no pod of StatefulSet %s (%d replicas)", where, call.flag, addr, podName, sts.Name, ptrOr(sts.Spec.Replicas, 1))
			return
		}
		targets = r.selectPods(selectorOf(t, "StatefulSet/"+sts.Name, sts.Spec.Selector))
	} else if s != nil {
		targets = r.selectPods(labels.SelectorFromSet(s.Spec.Selector))
	}
	if s == nil {
		t.Errorf("%s: --%s address %q: no Service %q in the release", where, call.flag, addr, name)
		return
	}
	var sp *corev1.ServicePort
	for i := range s.Spec.Ports {
		if strconv.Itoa(int(s.Spec.Ports[i].Port)) == port {
			sp = &s.Spec.Ports[i]
		}
	}
	if sp == nil {
		t.Errorf("%s: --%s address %q: Service %s has no port %s", where, call.flag, addr, s.Name, port)
		return
	}
	for _, target := range targets {
		if target.component != call.to {
			t.Errorf("%s: --%s points at %s, which is %s, not %s", where, call.flag, name, target.component, call.to)
		}
		// A pod's DNS name reaches the container port itself, not a Service port.
		tp := sp.TargetPort
		if name != s.Name {
			p, _ := strconv.Atoi(port)
			tp = intstr.FromInt(p)
		}
		if cp, _, ok := podPort(target, tp); !ok || cp.Name != "grpc" {
			t.Errorf("%s: --%s address %q reaches %s's %q port, not its gRPC port", where, call.flag, addr, target, cp.Name)
		}
	}
}

func (r *release) statefulSetOf(serviceName string) *appsv1.StatefulSet {
	for _, s := range r.statefulSets {
		if s.Spec.ServiceName == serviceName {
			return s
		}
	}
	return nil
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// replicated are the control-plane services that run several replicas under stable
// names, by values key; their callers are given every replica's address.
var replicated = map[string]string{"scheduler": "scheduler", "flash-indexer": "flashIndexer"}

// checkReplicaLists: a replicated service is a StatefulSet of <values>.replicas pods, and
// every flag holding its address lists each of those pods exactly once, in ordinal
// order, spelt the same in every container (frontends hash these strings to pick a
// session's scheduler); the scheduler's --peer-addrs is that same list. Its Certificate,
// if the chart writes it, names every pod.
func checkReplicaLists(t *testing.T, r *release) {
	for component, key := range replicated {
		want := int(r.value(key + ".replicas").(float64))
		pods := r.podsOf(component)
		if len(pods) != 1 {
			continue // checkWorkloads says so
		}
		sts := r.statefulSetOf(r.fullname() + "-" + component)
		if sts == nil || "StatefulSet/"+sts.Name != pods[0].workload {
			t.Errorf("%s runs as %s, want a StatefulSet governed by its headless Service", component, pods[0].workload)
			continue
		}
		if got := int(ptrOr(sts.Spec.Replicas, 1)); got != want {
			t.Errorf("StatefulSet/%s: %d replicas, %s.replicas is %d", sts.Name, got, key, want)
		}
		grpc, _, _ := podPort(pods[0], intstr.FromString("grpc"))
		var hosts, addrs []string
		for i := range want {
			h := fmt.Sprintf("%s-%d.%s.%s.svc", sts.Name, i, sts.Spec.ServiceName, namespace)
			hosts = append(hosts, h)
			addrs = append(addrs, fmt.Sprintf("%s:%d", h, grpc.ContainerPort))
		}
		wantList := strings.Join(addrs, ",")
		given := 0
		r.eachSwitchyardContainer(func(_ *pod, c *corev1.Container, svc, where string) {
			env := envMap(c)
			for _, call := range calls {
				if call.from != svc || call.to != component || call.flag == "" {
					continue
				}
				if got, set := env[envName(call.flag)]; set {
					given++
					if got != wantList {
						t.Errorf("%s: --%s=%q, want every %s replica, as every caller spells it: %q", where, call.flag, got, component, wantList)
					}
				}
			}
		})
		if given == 0 {
			t.Errorf("no container is given the %s replicas' addresses", component)
		}
		if cert := r.certificateFor(r.mtlsSecretOf(pods[0])); cert != nil {
			for _, h := range hosts {
				if !slices.Contains(cert.Spec.DNSNames, h) {
					t.Errorf("Certificate %s: DNS names %v lack the replica %s", cert.Name, cert.Spec.DNSNames, h)
				}
			}
		}
	}
}

// mtlsSecretOf is the Secret of a pod's mtls volume ("" without one).
func (r *release) mtlsSecretOf(p *pod) string {
	if v := volume(p, "mtls"); v != nil && v.Secret != nil {
		return v.Secret.SecretName
	}
	return ""
}

// fileFlags are the flags whose value is a file the pod must have.
var fileFlags = []string{"tls-cert", "tls-key", "tls-ca", "public-tls-cert", "public-tls-key", "api-keys-file"}

// checkFiles: every file a Switchyard container is told to read is in a volume mounted
// there, under a name that volume provides.
func checkFiles(t *testing.T, r *release) {
	provided := r.userProvided(t)
	r.eachSwitchyardContainer(func(p *pod, c *corev1.Container, _, where string) {
		env := envMap(c)
		for _, f := range fileFlags {
			file, set := env[envName(f)]
			if !set {
				continue
			}
			dir, base := path.Split(file)
			m := mountAt(c, strings.TrimSuffix(dir, "/"))
			if m == nil {
				t.Errorf("%s: --%s=%s is in no volume mounted there", where, f, file)
				continue
			}
			if !m.ReadOnly {
				t.Errorf("%s: volume %s with --%s is mounted writable", where, m.Name, f)
			}
			files, err := r.volumeFiles(p, m.Name, provided)
			if err != nil {
				t.Errorf("%s: --%s=%s: %v", where, f, file, err)
				continue
			}
			if !slices.Contains(files, base) {
				t.Errorf("%s: --%s=%s, but volume %s holds %v", where, f, file, m.Name, files)
			}
		}
	})
}

func mountAt(c *corev1.Container, dir string) *corev1.VolumeMount {
	for i, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(dir) {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volume(p *pod, name string) *corev1.Volume {
	for i, v := range p.spec.Volumes {
		if v.Name == name {
			return &p.spec.Volumes[i]
		}
	}
	return nil
}

var certFiles = []string{"tls.crt", "tls.key", "ca.crt"}

// volumeFiles are the file names a volume holds: a Secret's items, or the keys of the
// Secret (rendered, written by a Certificate, or what NOTES.txt tells you to put in
// it); a csi-driver volume's configured files.
func (r *release) volumeFiles(p *pod, name string, provided map[string]providedObject) ([]string, error) {
	v := volume(p, name)
	switch {
	case v == nil:
		return nil, fmt.Errorf("no volume %s", name)
	case v.Secret != nil:
		if len(v.Secret.Items) > 0 {
			var files []string
			for _, it := range v.Secret.Items {
				files = append(files, it.Path)
			}
			return files, nil
		}
		s := v.Secret.SecretName
		for _, sec := range r.secrets {
			if sec.Name == s {
				var keys []string
				for k := range sec.Data {
					keys = append(keys, k)
				}
				for k := range sec.StringData {
					keys = append(keys, k)
				}
				return keys, nil
			}
		}
		if r.certificateFor(s) != nil {
			return certFiles, nil
		}
		if po, ok := provided["Secret/"+s]; ok {
			return po.files, nil
		}
		return nil, fmt.Errorf("Secret %s is neither rendered nor listed as yours in NOTES.txt", s)
	case v.CSI != nil && v.CSI.Driver == r.str("tls.engineShims.csiDriver"):
		a := v.CSI.VolumeAttributes
		files := []string{"tls.crt", "tls.key", "ca.crt"}
		for i, k := range []string{"csi.cert-manager.io/certificate-file", "csi.cert-manager.io/privatekey-file", "csi.cert-manager.io/ca-file"} {
			if a[k] != "" {
				files[i] = a[k]
			}
		}
		return files, nil
	case v.CSI != nil:
		// tls.engineShims.volume: documented to hold these.
		return certFiles, nil
	}
	return nil, fmt.Errorf("volume %s: the test does not know what it holds", name)
}

func (r *release) certificateFor(secret string) *certificate {
	for _, c := range r.certificates {
		if c.Spec.SecretName == secret {
			return c
		}
	}
	return nil
}

func spiffeID(td, identity string) string { return "spiffe://" + td + "/switchyard/" + identity }

// checkIdentities: the certificate each Switchyard container presents carries that
// container's own identity (spiffe://<trust domain>/switchyard/<service>, a shim's
// .../engine-shim/<pod name>), usable as server and client; every Certificate is used,
// and issued by an Issuer that is rendered or yours.
func checkIdentities(t *testing.T, r *release) {
	if r.str("tls.mode") == "none" {
		if len(r.certificates) > 0 && !r.valueBool("frontend.publicTLS.enabled") {
			t.Errorf("tls.mode none renders %d Certificates", len(r.certificates))
		}
		return
	}
	td := r.str("tls.trustDomain")
	provided := r.userProvided(t)
	used := map[string]bool{}
	r.eachSwitchyardContainer(func(p *pod, c *corev1.Container, svc, where string) {
		want := spiffeID(td, svc)
		if svc == "engine-shim" {
			want = spiffeID(td, "engine-shim/${POD_NAME}")
		}
		dir, _ := path.Split(envMap(c)["SWITCHYARD_TLS_CERT"])
		m := mountAt(c, strings.TrimSuffix(dir, "/"))
		if m == nil {
			return // checkFiles says so
		}
		v := volume(p, m.Name)
		switch {
		case v == nil:
		case v.Secret != nil:
			used[v.Secret.SecretName] = true
			if cert := r.certificateFor(v.Secret.SecretName); cert != nil {
				if !slices.Equal(cert.Spec.URIs, []string{want}) {
					t.Errorf("%s: presents Certificate %s, whose URIs %v are not its identity %s", where, cert.Name, cert.Spec.URIs, want)
				}
				for _, u := range []string{"server auth", "client auth"} {
					if !slices.Contains(cert.Spec.Usages, u) {
						t.Errorf("%s: Certificate %s lacks usage %q", where, cert.Name, u)
					}
				}
			} else if po, ok := provided["Secret/"+v.Secret.SecretName]; ok {
				if svc == "engine-shim" {
					want = spiffeID(td, "engine-shim/<pod>")
				}
				if !strings.Contains(po.what, want) {
					t.Errorf("%s: NOTES.txt asks for Secret %s without naming the identity %s it must carry: %q", where, v.Secret.SecretName, want, po.what)
				}
			}
		case v.CSI != nil && v.CSI.Driver == r.str("tls.engineShims.csiDriver"):
			a := v.CSI.VolumeAttributes
			if a["csi.cert-manager.io/uri-sans"] != want {
				t.Errorf("%s: csi-driver URI SANs %q, want its identity %s", where, a["csi.cert-manager.io/uri-sans"], want)
			}
			for _, u := range []string{"server auth", "client auth"} {
				if !slices.Contains(strings.Split(a["csi.cert-manager.io/key-usages"], ","), u) {
					t.Errorf("%s: csi-driver key usages %q lack %q", where, a["csi.cert-manager.io/key-usages"], u)
				}
			}
			r.checkIssuer(t, where, issuerRef{Name: a["csi.cert-manager.io/issuer-name"], Kind: a["csi.cert-manager.io/issuer-kind"], Group: a["csi.cert-manager.io/issuer-group"]}, provided)
			if v.CSI.ReadOnly == nil || !*v.CSI.ReadOnly {
				t.Errorf("%s: csi-driver volumes must be readOnly", where)
			}
		}
	})
	for _, i := range r.issuers {
		if i.Spec.CA != nil {
			used[i.Spec.CA.SecretName] = true
		}
	}
	if fe := r.podsOf("frontend"); len(fe) == 1 {
		if v := volume(fe[0], "public-tls"); v != nil && v.Secret != nil {
			used[v.Secret.SecretName] = true
		}
	}
	for _, sm := range r.serviceMonitors {
		for _, ep := range sm.Spec.Endpoints {
			if ep.TLSConfig != nil && ep.TLSConfig.CA.Secret != nil {
				used[ep.TLSConfig.CA.Secret.Name] = true
				// A Certificate written only for its ca.crt must be of an identity that
				// may call nothing.
				if c := r.certificateFor(ep.TLSConfig.CA.Secret.Name); c != nil && !slices.Equal(c.Spec.URIs, []string{spiffeID(td, "prometheus")}) {
					t.Errorf("ServiceMonitor %s takes its CA from Certificate %s of %v", sm.Name, c.Name, c.Spec.URIs)
				}
			}
		}
	}
	for _, c := range r.certificates {
		if !used[c.Spec.SecretName] {
			t.Errorf("Certificate %s writes Secret %s, which nothing uses", c.Name, c.Spec.SecretName)
		}
		r.checkIssuer(t, "Certificate "+c.Name, c.Spec.IssuerRef, provided)
		for _, u := range c.Spec.URIs {
			if !strings.HasPrefix(u, "spiffe://"+td+"/switchyard/") {
				t.Errorf("Certificate %s: URI %s is outside the trust domain %s", c.Name, u, td)
			}
		}
	}
}

func (r *release) checkIssuer(t *testing.T, where string, ref issuerRef, provided map[string]providedObject) {
	kind := ref.Kind
	if kind == "" {
		kind = "Issuer"
	}
	if kind == "Issuer" {
		for _, i := range r.issuers {
			if i.Name == ref.Name {
				return
			}
		}
	}
	if _, ok := provided[kind+"/"+ref.Name]; !ok {
		t.Errorf("%s: issuer %s/%s is neither rendered nor listed as yours in NOTES.txt", where, kind, ref.Name)
	}
}

func (r *release) valueBool(path string) bool {
	b, _ := r.value(path).(bool)
	return b
}

// checkEngines: in each engine pod the shim and its engine agree: the engine kind, the
// engine's HTTP and KV event ports, block sizes, the served model; GPUs are requested
// as much as limited; the engine starts before the shim and stops after it.
func checkEngines(t *testing.T, r *release) {
	model := r.str("model.name")
	fe := r.podsOf("frontend")
	var feEnv map[string]string
	if len(fe) == 1 {
		feEnv = envMap(&fe[0].spec.Containers[0])
	}
	// One block size for the whole mesh: the frontend hashes prompts with it, the
	// scheduler and indexers count blocks in it, the shims announce them in it.
	sizes := map[string][]string{}
	r.eachSwitchyardContainer(func(p *pod, c *corev1.Container, _, _ string) {
		if v, set := envMap(c)["SWITCHYARD_BLOCK_SIZE"]; set {
			sizes[v] = append(sizes[v], p.workload)
		}
	})
	if len(sizes) != 1 {
		t.Errorf("the mesh's block sizes differ: %v", sizes)
	}
	for _, p := range r.podsOf("engine-shim") {
		shim, eng := p.shimAndEngine()
		native := false
		for _, c := range p.spec.InitContainers {
			if c.Name == "engine" {
				native = c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
			}
		}
		if shim == nil {
			t.Errorf("%s: no engine-shim container", p)
			continue
		}
		env := envMap(shim)
		kind := p.labels["switchyard.dev/engine"]
		if env["SWITCHYARD_ENGINE"] != kind {
			t.Errorf("%s: the shim's engine %q, the pod's label %q", p, env["SWITCHYARD_ENGINE"], kind)
		}
		if env["SWITCHYARD_MODEL"] != model || feEnv["SWITCHYARD_MODEL"] != model {
			t.Errorf("%s: shim model %q, frontend model %q, want model.name %q", p, env["SWITCHYARD_MODEL"], feEnv["SWITCHYARD_MODEL"], model)
		}
		if env["SWITCHYARD_BLOCK_SIZE"] != feEnv["SWITCHYARD_BLOCK_SIZE"] {
			t.Errorf("%s: shim block size %s, frontend's %s", p, env["SWITCHYARD_BLOCK_SIZE"], feEnv["SWITCHYARD_BLOCK_SIZE"])
		}
		if kind == "sim" {
			if eng != nil {
				t.Errorf("%s: a simulated worker with an engine container", p)
			}
			continue
		}
		if eng == nil {
			t.Errorf("%s: a %s worker without its engine container", p, kind)
			continue
		}
		if native && eng.StartupProbe == nil {
			t.Errorf("%s: a native-sidecar engine without a startup probe starts the shim before it is up", p)
		}
		if !native && (eng.Lifecycle == nil || eng.Lifecycle.PreStop == nil) {
			t.Errorf("%s: an engine beside the shim without a preStop wait dies before the shim has drained", p)
		}
		httpPort, ok := containerPort(eng, intstr.FromString("engine-http"))
		if !ok {
			t.Errorf("%s: the engine has no engine-http port", p)
		} else if u, err := url.Parse(env["SWITCHYARD_ENGINE_URL"]); err != nil || u.Scheme != "http" || u.Port() != strconv.Itoa(int(httpPort.ContainerPort)) || !isLoopback(u.Hostname()) {
			// Which loopback address: checkListenAddresses.
			t.Errorf("%s: the shim reaches its engine at %q, the engine listens on port %d of the pod (loopback included)", p, env["SWITCHYARD_ENGINE_URL"], httpPort.ContainerPort)
		}
		args := strings.Join(eng.Args, " ")
		ebs := env["SWITCHYARD_ENGINE_BLOCK_SIZE"]
		if b, err1 := strconv.Atoi(ebs); err1 != nil {
			t.Errorf("%s: engine block size %q", p, ebs)
		} else if s, _ := strconv.Atoi(env["SWITCHYARD_BLOCK_SIZE"]); b%s != 0 && s%b != 0 {
			t.Errorf("%s: engine block size %d is neither a multiple nor a divisor of %d", p, b, s)
		}
		sizeFlag := map[string]string{"vllm": "--block-size=", "sglang": "--page-size="}[kind]
		if strings.Contains(args, sizeFlag) && !slices.Contains(eng.Args, sizeFlag+ebs) {
			t.Errorf("%s: the engine runs %s..., the shim expects %s", p, sizeFlag, ebs)
		}
		if strings.Contains(args, "--served-model-name=") && !slices.Contains(eng.Args, "--served-model-name="+model) {
			t.Errorf("%s: the engine serves another name than %s", p, model)
		}
		for flag, portName := range map[string]string{"SWITCHYARD_KV_EVENTS_ENDPOINT": "kv-events", "SWITCHYARD_KV_REPLAY_ENDPOINT": "kv-replay"} {
			ep := env[flag]
			if ep == "" {
				continue
			}
			cp, ok := containerPort(eng, intstr.FromString(portName))
			if want := fmt.Sprintf("tcp://127.0.0.1:%d", cp.ContainerPort); !ok || ep != want {
				t.Errorf("%s: %s=%q, the engine's %s port is %v", p, flag, ep, portName, cp.ContainerPort)
			}
		}
		checkKVEventsConfig(t, p, eng, env)
		gpu := corev1.ResourceName(fmt.Sprint(r.value("enginePoolDefaults.gpuResource")))
		for _, pool := range r.pools() {
			if pool["name"] == p.pool && pool["gpuResource"] != nil {
				gpu = corev1.ResourceName(fmt.Sprint(pool["gpuResource"]))
			}
		}
		req, lim := eng.Resources.Requests[gpu], eng.Resources.Limits[gpu]
		if lim.IsZero() || req.Cmp(lim) != 0 {
			t.Errorf("%s: engine %s requests %s and limits %s", p, gpu, req.String(), lim.String())
		}
	}
}

// checkKVEventsConfig: the engine publishes (and replays) KV events where the shim
// subscribes, under a topic the shim's prefix matches.
func checkKVEventsConfig(t *testing.T, p *pod, eng *corev1.Container, env map[string]string) {
	var cfg struct {
		Endpoint       string `json:"endpoint"`
		ReplayEndpoint string `json:"replay_endpoint"`
		Topic          string `json:"topic"`
	}
	found := false
	for _, a := range eng.Args {
		if v, ok := strings.CutPrefix(a, "--kv-events-config="); ok {
			found = true
			if err := json.Unmarshal([]byte(v), &cfg); err != nil {
				t.Errorf("%s: --kv-events-config: %v", p, err)
				return
			}
		}
	}
	if !found {
		if env["SWITCHYARD_KV_EVENTS_ENDPOINT"] != "" && !slices.ContainsFunc(eng.Args, func(a string) bool { return strings.Contains(a, "kv-events") }) {
			t.Errorf("%s: the shim follows KV events the engine is not told to publish", p)
		}
		return
	}
	port := func(ep string) string { _, p, _ := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://")); return p }
	if port(cfg.Endpoint) != port(env["SWITCHYARD_KV_EVENTS_ENDPOINT"]) || port(cfg.ReplayEndpoint) != port(env["SWITCHYARD_KV_REPLAY_ENDPOINT"]) {
		t.Errorf("%s: engine publishes on %s (replay %s), shim follows %s (replay %s)", p, cfg.Endpoint, cfg.ReplayEndpoint, env["SWITCHYARD_KV_EVENTS_ENDPOINT"], env["SWITCHYARD_KV_REPLAY_ENDPOINT"])
	}
	if !strings.HasPrefix(cfg.Topic, env["SWITCHYARD_KV_EVENTS_TOPIC"]) {
		t.Errorf("%s: engine topic %q, shim subscribes to %q", p, cfg.Topic, env["SWITCHYARD_KV_EVENTS_TOPIC"])
	}
}

// pools are the values' engine pools (before the chart merges its defaults).
func (r *release) pools() []map[string]any {
	var out []map[string]any
	list, _ := r.value("enginePools").([]any)
	for _, p := range list {
		if m, ok := p.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// spread are the control-plane services that run several replicas, by values key: each
// spreads them over its topologySpread.topologyKeys unless that is disabled.
var spread = map[string]string{"frontend": "frontend", "scheduler": "scheduler", "flash-indexer": "flashIndexer"}

// checkDisruptionAndSpread: every PodDisruptionBudget covers the pods of one workload;
// every topology spread selects its own pods; every control-plane service of several
// replicas spreads them as its values say, unless they disable it.
func checkDisruptionAndSpread(t *testing.T, r *release) {
	for _, b := range r.pdbs {
		id := "PodDisruptionBudget/" + b.Name
		pods := r.selectPods(selectorOf(t, id, b.Spec.Selector))
		if len(pods) != 1 {
			t.Errorf("%s: selects the pods of %v, want one workload's", id, pods)
		}
		if (b.Spec.MinAvailable == nil) == (b.Spec.MaxUnavailable == nil) {
			t.Errorf("%s: set exactly one of minAvailable and maxUnavailable", id)
		}
	}
	for _, p := range r.pods {
		for _, c := range p.spec.TopologySpreadConstraints {
			if !selectorOf(t, p.workload+" topology spread", c.LabelSelector).Matches(labels.Set(p.labels)) {
				t.Errorf("%s: a topology spread constraint on %s that does not select its own pods", p, c.TopologyKey)
			}
		}
	}
	for component, key := range spread {
		if on, set := r.value(key + ".topologySpread.enabled").(bool); set && !on {
			continue
		}
		// Where the values say nothing, the frontends' spread is the default.
		from := key
		if r.value(key+".topologySpread") == nil {
			from = "frontend"
		}
		var want []string
		for _, k := range asList(r.value(from + ".topologySpread.topologyKeys")) {
			want = append(want, fmt.Sprint(k))
		}
		when := r.str(from + ".topologySpread.whenUnsatisfiable")
		for _, p := range r.podsOf(component) {
			var got []string
			for _, c := range p.spec.TopologySpreadConstraints {
				got = append(got, c.TopologyKey)
				if string(c.WhenUnsatisfiable) != when || c.MaxSkew != 1 {
					t.Errorf("%s: spread over %s is maxSkew %d, %s; want 1, %s (%s.topologySpread)", p, c.TopologyKey, c.MaxSkew, c.WhenUnsatisfiable, when, key)
				}
				if strings.HasPrefix(p.workload, "StatefulSet/") && slices.Contains(c.MatchLabelKeys, "pod-template-hash") {
					t.Errorf("%s: matchLabelKeys pod-template-hash, a label a StatefulSet's pods do not have", p)
				}
			}
			if len(got) == 0 || !slices.Equal(got, want) {
				t.Errorf("%s: spread over %v, want %v (%s.topologySpread)", p, got, want, key)
			}
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// graceMargin is the chart's switchyard.graceMargin: what a grace period leaves beyond a
// preStop sleep and a drain, for the process to exit.
const graceMargin = 5

// preStopSleep is a container's preStop sleep in seconds (0: none).
func preStopSleep(c *corev1.Container) int64 {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		return 0
	}
	return c.Lifecycle.PreStop.Sleep.Seconds
}

// drainSeconds is a Switchyard container's drain on shutdown: its --shutdown-timeout
// (servicekit's default, 10s, when unset or not positive), in whole seconds rounded up.
func drainSeconds(t *testing.T, where string, c *corev1.Container) int64 {
	d := 10 * time.Second
	if v, set := envMap(c)["SWITCHYARD_SHUTDOWN_TIMEOUT"]; set {
		parsed, err := time.ParseDuration(v)
		if err != nil {
			t.Errorf("%s: SWITCHYARD_SHUTDOWN_TIMEOUT=%q: %v", where, v, err)
		} else if parsed > 0 {
			d = parsed
		}
	}
	secs := int64(d / time.Second)
	if d%time.Second != 0 {
		secs++ // (d + time.Second - 1) would overflow near the longest duration
	}
	return secs
}

// checkTermination: every preStop sleep is one Kubernetes accepts (more than 0 s, and
// less than the grace period); a pod's grace period covers each Switchyard container's
// preStop sleep, its drain (--shutdown-timeout) and graceMargin; an engine beside its shim
// (no native sidecar) sleeps through the shim's drain and has graceMargin left after it.
func checkTermination(t *testing.T, r *release) {
	for _, p := range r.pods {
		grace := ptrOr(p.spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)
		var shimDrain int64
		for _, c := range p.containers() {
			where := p.nameOf(c)
			sleep := preStopSleep(c)
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil && (sleep <= 0 || sleep >= grace) {
				t.Errorf("%s: a preStop sleep of %d s in a grace period of %d s, which Kubernetes refuses", where, sleep, grace)
			}
			if svc, ok := switchyardService(r, c); ok {
				drain := drainSeconds(t, where, c)
				if svc == "engine-shim" {
					shimDrain = drain
				}
				if need := sleep + drain + graceMargin; grace < need {
					t.Errorf("%s: grace period %d s, less than its preStop sleep (%d s) + drain (%d s) + %d s: the kubelet kills it mid-drain", where, grace, sleep, drain, graceMargin)
				}
			}
		}
		for _, c := range p.spec.Containers {
			if c.Name != "engine" {
				continue
			}
			if sleep := preStopSleep(&c); sleep < shimDrain || grace < sleep+graceMargin {
				t.Errorf("%s: the engine sleeps %d s on stop, its shim drains for %d s, the grace period is %d s", p, sleep, shimDrain, grace)
			}
		}
	}
}

// checkFrontendServices: the frontend's public Service carries its HTTP port alone, on
// frontend.service.port; its gRPC port is on a ClusterIP Service of its own; no Service
// that publishes ports outside the cluster (NodePort, LoadBalancer) has any port but a
// frontend's http.
func checkFrontendServices(t *testing.T, r *release) {
	for _, s := range r.services {
		if s.Spec.Type != corev1.ServiceTypeNodePort && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		for _, p := range r.selectPods(labels.SelectorFromSet(s.Spec.Selector)) {
			for _, sp := range s.Spec.Ports {
				if cp, _, ok := podPort(p, sp.TargetPort); !ok || p.component != "frontend" || cp.Name != "http" {
					t.Errorf("Service/%s (%s) publishes port %s, %s's %q port, outside the cluster", s.Name, s.Spec.Type, sp.Name, p, cp.Name)
				}
			}
		}
	}
	pub := r.service(r.fullname() + "-frontend")
	if pub == nil {
		t.Errorf("no Service %s-frontend", r.fullname())
		return
	}
	want := int32(8000)
	if v, ok := r.value("frontend.service.port").(float64); ok {
		want = int32(v)
	}
	if len(pub.Spec.Ports) != 1 || pub.Spec.Ports[0].Port != want || pub.Spec.Ports[0].TargetPort != intstr.FromString("http") {
		t.Errorf("Service/%s: ports %+v, want the frontends' http port alone, on frontend.service.port %d", pub.Name, pub.Spec.Ports, want)
	}
	internal := false
	for _, s := range r.services {
		for _, sp := range s.Spec.Ports {
			for _, p := range r.selectPods(labels.SelectorFromSet(s.Spec.Selector)) {
				if cp, _, ok := podPort(p, sp.TargetPort); ok && p.component == "frontend" && cp.Name == "grpc" {
					internal = true
					if s.Spec.Type != corev1.ServiceTypeClusterIP {
						t.Errorf("Service/%s: the frontend's gRPC port on a %s Service", s.Name, s.Spec.Type)
					}
				}
			}
		}
	}
	if !internal {
		t.Errorf("no Service of the frontend's gRPC port (operators reach its admin API there)")
	}
}

// checkServiceMonitors: each selects Services of the release and scrapes a named port
// they have; with mutual TLS on it scrapes over TLS, checking the mesh CA.
func checkServiceMonitors(t *testing.T, r *release) {
	if r.valueBool("serviceMonitor.enabled") && len(r.serviceMonitors) == 0 {
		t.Error("serviceMonitor.enabled renders no ServiceMonitor")
	}
	for _, sm := range r.serviceMonitors {
		id := "ServiceMonitor/" + sm.Name
		sel := selectorOf(t, id, &sm.Spec.Selector)
		if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
			t.Errorf("%s: namespaces %v", id, sm.Spec.NamespaceSelector.MatchNames)
		}
		var svcs []*corev1.Service
		for _, s := range r.services {
			if sel.Matches(labels.Set(s.Labels)) {
				svcs = append(svcs, s)
			}
		}
		if len(svcs) == 0 {
			t.Errorf("%s: selects no Service", id)
		}
		for _, ep := range sm.Spec.Endpoints {
			for _, s := range svcs {
				if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					t.Errorf("%s: port %q is not a port of Service %s", id, ep.Port, s.Name)
				}
			}
			frontend := slices.ContainsFunc(svcs, func(s *corev1.Service) bool { return s.Labels["app.kubernetes.io/component"] == "frontend" })
			tlsOn := r.str("tls.mode") != "none"
			if !frontend && tlsOn && (ep.Scheme.String() != "https" || ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil || ep.TLSConfig.CA.Secret.Key != "ca.crt") {
				t.Errorf("%s: mutual TLS is on (the HTTP ports speak TLS) but the scrape does not check the mesh CA's ca.crt over https", id)
			}
			if ep.TLSConfig != nil && ep.TLSConfig.ServerName != nil && !frontend {
				for _, s := range svcs {
					if *ep.TLSConfig.ServerName != s.Name+"."+namespace+".svc" {
						t.Errorf("%s: server name %s for Service %s", id, *ep.TLSConfig.ServerName, s.Name)
					}
				}
			}
		}
	}
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// engineHost is the address an engine's HTTP server listens on: its --host, or its
// default (vLLM binds the empty host, IPv4's wildcard in many versions; SGLang 127.0.0.1).
func engineHost(kind string, args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--host="); ok {
			return v
		}
		if a == "--host" && i+1 < len(args) {
			return args[i+1]
		}
	}
	if kind == "vllm" {
		return "0.0.0.0"
	}
	return "127.0.0.1"
}

// checkListenAddresses: what is dialled at the pod's IP listens on the pod's IP family
// (ipFamily). An engine's HTTP server, which the kubelet's httpGet probes dial at the pod
// IP, listens on that family's wildcard ("::" on IPv6, 0.0.0.0 on IPv4). A Switchyard
// service listens on a wildcard address: Go's net.Listen("tcp") takes both families on
// one, ":9500" (as "[::]:9500" and even "0.0.0.0:9500"), but not a single IP. The shim
// reaches its engine on a loopback address of the family it listens on, [::1] when it
// listens on "::" (SGLang's server, uvicorn on asyncio or uvloop, then takes IPv6 alone),
// 127.0.0.1 on 0.0.0.0; and the engine's KV event sockets, bound on ZMQ's IPv4 wildcard
// (tcp://*), on 127.0.0.1, which every pod has whatever its family.
func checkListenAddresses(t *testing.T, r *release) {
	v6 := r.str("ipFamily") == "IPv6"
	r.eachSwitchyardContainer(func(_ *pod, c *corev1.Container, _, where string) {
		env := envMap(c)
		for name := range listenFlags {
			host, _, err := net.SplitHostPort(env[name])
			if err != nil || host != "" && !net.ParseIP(host).IsUnspecified() {
				t.Errorf("%s: %s=%q is no wildcard address: the kubelet probes, and its callers dial, the pod's IP", where, name, env[name])
			}
		}
	})
	for _, p := range r.podsOf("engine-shim") {
		shim, eng := p.shimAndEngine()
		if shim == nil || eng == nil {
			continue // a simulated engine, or checkEngines says so
		}
		env := envMap(shim)
		kind := p.labels["switchyard.dev/engine"]
		host := engineHost(kind, eng.Args)
		want, loopback := "0.0.0.0", "127.0.0.1"
		if v6 {
			want, loopback = "::", "::1"
		}
		if host != want {
			t.Errorf("%s: the %s engine listens on %q, but the kubelet probes it at the pod's %s address: want --host=%s", p, kind, host, r.str("ipFamily"), want)
		}
		if u, err := url.Parse(env["SWITCHYARD_ENGINE_URL"]); err != nil || u.Hostname() != loopback {
			t.Errorf("%s: the shim reaches its engine listening on %q at %q, want host %s", p, host, env["SWITCHYARD_ENGINE_URL"], loopback)
		}
		for _, flag := range []string{"SWITCHYARD_KV_EVENTS_ENDPOINT", "SWITCHYARD_KV_REPLAY_ENDPOINT"} {
			if ep := env[flag]; ep != "" {
				if h, _, err := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://")); err != nil || h != "127.0.0.1" {
					t.Errorf("%s: %s=%q: the engine publishes on ZMQ's IPv4 wildcard, reached at 127.0.0.1", p, flag, ep)
				}
			}
		}
		for _, a := range eng.Args {
			if v, ok := strings.CutPrefix(a, "--kv-events-config="); ok {
				var cfg struct {
					Endpoint       string `json:"endpoint"`
					ReplayEndpoint string `json:"replay_endpoint"`
				}
				if err := json.Unmarshal([]byte(v), &cfg); err == nil {
					for _, ep := range []string{cfg.Endpoint, cfg.ReplayEndpoint} {
						if h, _, err := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://")); ep != "" && (err != nil || h != "*" && h != "0.0.0.0") {
							t.Errorf("%s: the engine publishes KV events on %q, which the shim's tcp://127.0.0.1 does not reach", p, ep)
						}
					}
				}
			}
		}
	}
}
