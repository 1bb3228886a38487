package deploy

import (
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"gopkg.in/yaml.v3"
)

const docsFile = "../docs/deploy-kubernetes.md"

// docs is what the test reads from docs/deploy-kubernetes.md.
type docs struct {
	// userProvided: the values keys of its "what you provide" table, with the kinds
	// each names.
	userProvided map[string][]string
	// code: every `span` of the page.
	code map[string]bool
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	fence    = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```[^\n]*$")
)

func readDocs(t *testing.T) docs {
	t.Helper()
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	text := fence.ReplaceAllString(string(b), "")
	d := docs{userProvided: map[string][]string{}, code: map[string]bool{}}
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		d.code[m[1]] = true
	}
	start := strings.Index(text, "<!-- user-provided -->")
	end := strings.Index(text, "<!-- /user-provided -->")
	if start < 0 || end < start {
		t.Fatalf("%s: no <!-- user-provided --> ... <!-- /user-provided --> table", docsFile)
	}
	for _, line := range strings.Split(text[start:end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		kinds := strings.Split(strings.TrimSpace(cells[1]), " or ")
		for _, m := range codeSpan.FindAllStringSubmatch(cells[2], -1) {
			d.userProvided[m[1]] = append(d.userProvided[m[1]], kinds...)
		}
	}
	if len(d.userProvided) == 0 {
		t.Fatalf("%s: the user-provided table is empty", docsFile)
	}
	return d
}

// providedObject is one line of NOTES.txt's "You provide" list.
type providedObject struct {
	kind, name, key, what string
	files                 []string // the file names it mentions (<pod> as $(POD_NAME))
}

var (
	notesLine = regexp.MustCompile(`^  - ([A-Za-z]+)/(\S+) \(([^)]+)\): (.*)$`)
	fileName  = regexp.MustCompile(`(<pod>|[A-Za-z0-9_-]+)\.(crt|key)\b`)
)

// userProvided parses NOTES.txt's list of what the user must create.
func (r *release) userProvided(t *testing.T) map[string]providedObject {
	out := map[string]providedObject{}
	in := false
	for _, line := range strings.Split(r.notes, "\n") {
		if strings.HasPrefix(line, "You provide") {
			in = true
			continue
		}
		if !in {
			continue
		}
		m := notesLine.FindStringSubmatch(line)
		if m == nil {
			break
		}
		po := providedObject{kind: m[1], name: m[2], key: m[3], what: m[4]}
		for _, f := range fileName.FindAllString(po.what, -1) {
			po.files = append(po.files, strings.ReplaceAll(f, "<pod>", "$(POD_NAME)"))
		}
		out[po.kind+"/"+po.name] = po
	}
	return out
}

// checkReferences: every Secret, ConfigMap, ServiceAccount, PersistentVolumeClaim and
// issuer the release refers to is rendered (a Certificate renders its Secret) or listed
// in NOTES.txt as yours, and NOTES.txt lists nothing else; each listed values key is in
// the docs' table of what you provide.
func checkReferences(t *testing.T, r *release, d docs) {
	refs := map[string][]string{} // Kind/name -> where
	ref := func(kind, name, where string) {
		if name != "" {
			refs[kind+"/"+name] = append(refs[kind+"/"+name], where)
		}
	}
	rendered := map[string]bool{}
	for _, s := range r.secrets {
		rendered["Secret/"+s.Name] = true
	}
	for _, c := range r.certificates {
		rendered["Secret/"+c.Spec.SecretName] = true
		kind := c.Spec.IssuerRef.Kind
		if kind == "" {
			kind = "Issuer"
		}
		ref(kind, c.Spec.IssuerRef.Name, "Certificate/"+c.Name)
	}
	for _, c := range r.configMaps {
		rendered["ConfigMap/"+c.Name] = true
	}
	for _, s := range r.serviceAccounts {
		rendered["ServiceAccount/"+s.Name] = true
	}
	for _, i := range r.issuers {
		rendered["Issuer/"+i.Name] = true
		if i.Spec.CA != nil {
			ref("Secret", i.Spec.CA.SecretName, "Issuer/"+i.Name)
		}
	}
	for _, p := range r.pods {
		if sa := p.spec.ServiceAccountName; sa != "default" {
			ref("ServiceAccount", sa, p.workload)
		}
		for _, s := range p.spec.ImagePullSecrets {
			ref("Secret", s.Name, p.workload)
		}
		for _, v := range p.spec.Volumes {
			where := p.workload + " volume " + v.Name
			switch {
			case v.Secret != nil:
				ref("Secret", v.Secret.SecretName, where)
			case v.ConfigMap != nil:
				ref("ConfigMap", v.ConfigMap.Name, where)
			case v.PersistentVolumeClaim != nil:
				ref("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName, where)
			case v.Projected != nil:
				for _, s := range v.Projected.Sources {
					if s.Secret != nil {
						ref("Secret", s.Secret.Name, where)
					}
					if s.ConfigMap != nil {
						ref("ConfigMap", s.ConfigMap.Name, where)
					}
				}
			case v.CSI != nil && v.CSI.Driver == r.str("tls.engineShims.csiDriver"):
				a := v.CSI.VolumeAttributes
				kind := a["csi.cert-manager.io/issuer-kind"]
				if kind == "" {
					kind = "Issuer"
				}
				ref(kind, a["csi.cert-manager.io/issuer-name"], where)
			}
		}
		for _, c := range p.containers() {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					ref("Secret", e.ValueFrom.SecretKeyRef.Name, p.workload+" env "+e.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					ref("ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name, p.workload+" env "+e.Name)
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil {
					ref("Secret", e.SecretRef.Name, p.workload+" envFrom")
				}
				if e.ConfigMapRef != nil {
					ref("ConfigMap", e.ConfigMapRef.Name, p.workload+" envFrom")
				}
			}
		}
	}
	for _, sm := range r.serviceMonitors {
		for _, ep := range sm.Spec.Endpoints {
			if c := ep.TLSConfig; c != nil {
				where := "ServiceMonitor/" + sm.Name
				for _, sc := range []monitoringv1.SecretOrConfigMap{c.CA, c.Cert} {
					if sc.Secret != nil {
						ref("Secret", sc.Secret.Name, where)
					}
					if sc.ConfigMap != nil {
						ref("ConfigMap", sc.ConfigMap.Name, where)
					}
				}
				if c.KeySecret != nil {
					ref("Secret", c.KeySecret.Name, where)
				}
			}
		}
	}
	provided := r.userProvided(t)
	for id, where := range refs {
		if rendered[id] {
			continue
		}
		if _, ok := provided[id]; !ok {
			t.Errorf("%s (used by %s) is neither rendered nor listed in NOTES.txt as yours", id, strings.Join(slices.Compact(where), ", "))
		}
	}
	ids := make([]string, 0, len(provided))
	for id := range provided {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		po := provided[id]
		if rendered[id] {
			t.Errorf("NOTES.txt asks you for %s, which the chart renders", id)
		}
		if _, used := refs[id]; !used {
			t.Errorf("NOTES.txt asks you for %s, which nothing uses", id)
		}
		if kinds, ok := d.userProvided[po.key]; !ok || !slices.Contains(kinds, po.kind) {
			t.Errorf("NOTES.txt lists %s under %s, which the user-provided table of %s does not (as %s)", id, po.key, docsFile, po.kind)
		}
	}
}

// opaque values keys hold Kubernetes objects or free maps, documented as one key.
var opaque = []string{"resources", "nodeSelector", "tolerations", "affinity", "podAnnotations", "annotations",
	"labels", "flags", "extraEnv", "env", "volume", "extraVolumes", "extraVolumeMounts", "extraIngress",
	"frontendFrom", "adminFrom", "metricsFrom"}

// TestValuesDocumented: every key of values.yaml has a comment above it, and is in
// docs/deploy-kubernetes.md (an engine pool's keys as enginePools[].<key>); every key
// the docs name as a value exists.
func TestValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	var keys, leaves []string // every key; those the docs must describe (not groups)
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			walk(n.Content[0], path)
		case yaml.SequenceNode:
			if n.Style&yaml.FlowStyle == 0 && len(n.Content) > 0 && n.Content[0].Kind == yaml.MappingNode {
				walk(n.Content[0], path+"[]")
			}
		case yaml.MappingNode:
			if n.Style&yaml.FlowStyle != 0 {
				return
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if strings.TrimSpace(k.HeadComment) == "" && !(i == 0 && strings.TrimSpace(n.HeadComment) != "") {
					t.Errorf("values.yaml:%d: %s has no comment", k.Line, p)
				}
				keys = append(keys, p)
				group := v.Style&yaml.FlowStyle == 0 && (v.Kind == yaml.MappingNode && len(v.Content) > 0 ||
					v.Kind == yaml.SequenceNode && len(v.Content) > 0 && v.Content[0].Kind == yaml.MappingNode)
				if slices.Contains(opaque, k.Value) || !group || k.Value == "enginePools" {
					leaves = append(leaves, p)
				}
				if !slices.Contains(opaque, k.Value) {
					walk(v, p)
				}
			}
		}
	}
	walk(&root, "")
	d := readDocs(t)
	for _, k := range leaves {
		doc := k
		if rest, ok := strings.CutPrefix(k, "enginePoolDefaults."); ok {
			doc = "enginePools[]." + rest
		}
		if !d.code[doc] {
			t.Errorf("%s: value %s is not in the docs (as `%s`)", docsFile, k, doc)
		}
	}
	// The other way: a `key` of the docs' values tables that values.yaml lacks.
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
		if rest, ok := strings.CutPrefix(k, "enginePoolDefaults."); ok {
			known["enginePools[]."+rest] = true
		}
	}
	text, _ := os.ReadFile(docsFile)
	for _, line := range strings.Split(fence.ReplaceAllString(string(text), ""), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		k := codeSpan.FindStringSubmatch(line)[1]
		if looksLikeValuesKey(k) && !known[k] {
			t.Errorf("%s: the docs describe a value %s that values.yaml does not have", docsFile, k)
		}
	}
}

var valuesKey = regexp.MustCompile(`^[a-z][A-Za-z]*(\[\])?(\.[a-z][A-Za-z]*(\[\])?)+$|^(nameOverride|fullnameOverride|imagePullSecrets|blockSize|logLevel|enginePools)$`)

func looksLikeValuesKey(s string) bool { return valuesKey.MatchString(s) }

// TestAgentURLsInDocs: the agent settings of the docs' "Pointing an agent at it" use the
// URL that the chart serves for the vLLM example they are written for, as NOTES.txt
// prints it (the scheme of publicTLS, the Service's port unless it is 443).
func TestAgentURLsInDocs(t *testing.T) {
	r := render(t, loadChart(t), chartDir+"/examples/vllm.yaml")
	m := regexp.MustCompile(`ANTHROPIC_BASE_URL=(\S+)`).FindStringSubmatch(r.notes)
	if m == nil {
		t.Fatalf("NOTES.txt gives no ANTHROPIC_BASE_URL:\n%s", r.notes)
	}
	want := m[1]
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "- **Claude Code**")
	end := strings.Index(text, "Sessions are recognised")
	if start < 0 || end < start {
		t.Fatalf("%s: no agent settings between \"- **Claude Code**\" and \"Sessions are recognised\"", docsFile)
	}
	u, err := url.Parse(want)
	if err != nil || u.Hostname() == "" {
		t.Fatalf("NOTES.txt's ANTHROPIC_BASE_URL %q: %v", want, err)
	}
	urls := regexp.MustCompile(`https?://`+regexp.QuoteMeta(u.Hostname())+`(:\d+)?`).FindAllString(text[start:end], -1)
	if len(urls) < 3 {
		t.Fatalf("%s: found only %v among the agent settings, want Claude Code's, Codex's and OpenCode's", docsFile, urls)
	}
	for _, u := range urls {
		if u != want {
			t.Errorf("%s: an agent is pointed at %s, but the chart serves the vLLM example at %s", docsFile, u, want)
		}
	}
}

// TestIPv6Docs: the docs' paragraph on ipFamily IPv6 names what it changes as the chart
// renders it: the shims' advertised address, the engines' --host, the address the shim
// reaches its engine at.
func TestIPv6Docs(t *testing.T) {
	r := renderYAML(t, loadChart(t), "ipFamily: IPv6\nenginePools: [{name: vl, engine: vllm, model: m}, {name: sg, engine: sglang, model: m}]")
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "On an IPv6-only cluster")
	if start < 0 {
		t.Fatalf("%s: no paragraph on IPv6 (\"On an IPv6-only cluster\")", docsFile)
	}
	para := text[start:]
	if end := strings.Index(para, "\n\n"); end >= 0 {
		para = para[:end]
	}
	para = strings.Join(strings.Fields(para), " ")
	want := map[string]bool{}
	for _, p := range r.podsOf("engine-shim") {
		for _, c := range p.containers() {
			env := envMap(c)
			if a := env["SWITCHYARD_ADVERTISE_ADDR"]; a != "" {
				want["`"+a+"`"] = true
			}
			if u, err := url.Parse(env["SWITCHYARD_ENGINE_URL"]); err == nil && u.Host != "" {
				want["`"+strings.TrimSuffix(u.String(), u.Port())+"<port>`"] = true
			}
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--host") {
					want["`"+a+"`"] = true
				}
			}
		}
	}
	if len(want) < 3 {
		t.Fatalf("the render gives only %v", want)
	}
	for w := range want {
		if !strings.Contains(para, w) {
			t.Errorf("%s: the IPv6 paragraph does not say %s, which ipFamily IPv6 renders:\n%s", docsFile, w, para)
		}
	}
}
