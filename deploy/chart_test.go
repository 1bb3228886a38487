package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

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
			checkReferences(t, r, docs)
			checkDisruptionAndSpread(t, r)
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

func render(t *testing.T, ch *chart.Chart, file string) *release {
	t.Helper()
	vals := readValues(t, file)
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
