{{/*
Names, labels and the few facts every template shares: the services' ports, who calls
whom, which Secrets hold which certificates. Templates take them from here so that a
name is spelt once.
*/}}

{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every resource name. Kept short: "<fullname>-session-prefix-indexer"
must stay a DNS label. */}}
{{- define "switchyard.fullname" -}}
{{- $name := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $name = .Values.fullnameOverride -}}
{{- else -}}
{{- $base := default .Chart.Name .Values.nameOverride -}}
{{- $name = ternary .Release.Name (printf "%s-%s" .Release.Name $base) (contains $base .Release.Name) -}}
{{- end -}}
{{- if gt (len $name) 40 -}}
{{- fail (printf "the full name %q is longer than 40 characters: set fullnameOverride" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "switchyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "switchyard.labels" -}}
helm.sh/chart: {{ include "switchyard.chart" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchyard
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of one component: dict "root" $ "component" name. */}}
{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The Switchyard services of the control plane: values key and ports (the defaults of
servicekit.Ports; health is a plaintext grpc.health.v1 listener for the kubelet's native
probes, gRPC + 2). engine-shim runs in the engine pools. */}}
{{- define "switchyard.components" -}}
frontend: {values: frontend, grpc: 8001, http: 8000, health: 8002}
scheduler: {values: scheduler, grpc: 9100, http: 9101, health: 9102}
flash-indexer: {values: flashIndexer, grpc: 9200, http: 9201, health: 9202}
session-prefix-indexer: {values: sessionPrefixIndexer, grpc: 9300, http: 9301, health: 9302}
kvhint-emitter: {values: kvhintEmitter, grpc: 9400, http: 9401, health: 9402}
engine-shim: {values: enginePoolDefaults, grpc: 9500, http: 9501, health: 9502}
kv-pool: {values: kvPool, grpc: 9600, http: 9601, health: 9602}
{{- end -}}

{{/* The control-plane components this release runs, in start order. */}}
{{- define "switchyard.controlPlane" -}}
{{- $names := list "scheduler" "flash-indexer" "session-prefix-indexer" "kvhint-emitter" "frontend" -}}
{{- if .Values.kvPool.enabled }}{{ $names = prepend $names "kv-pool" }}{{ end -}}
{{- toJson $names -}}
{{- end -}}

{{/* The control-plane services that run several replicas under stable names: a
StatefulSet of <values>.replicas pods, <fullname>-<service>-<n>, each resolvable through
the service's headless Service, and all of them listed in their callers' *-addr flags
(switchyard.addrs). */}}
{{- define "switchyard.replicated" -}}
{{- toJson (list "scheduler" "flash-indexer") -}}
{{- end -}}

{{/* Who dials whom over gRPC: for each callee, its callers. Mirrors the *-addr flags and
the worker addresses the scheduler hands out; the NetworkPolicies admit exactly these.
"engine-shim(pool)" is a shim that uses the shared pool. The schedulers call each other
(--peer-addrs: their admission use). */}}
{{- define "switchyard.callers" -}}
scheduler: [frontend, flash-indexer, session-prefix-indexer, kvhint-emitter, engine-shim, scheduler]
flash-indexer: [scheduler]
session-prefix-indexer: [kvhint-emitter]
kvhint-emitter: [frontend]
frontend: []
engine-shim: [frontend, scheduler, flash-indexer, session-prefix-indexer, kvhint-emitter]
kv-pool: [flash-indexer, "engine-shim(pool)"]
{{- end -}}

{{/* The pod selector of a caller named in switchyard.callers: dict "root" $ "caller" name. */}}
{{- define "switchyard.callerSelector" -}}
{{- if eq .caller "engine-shim(pool)" -}}
{{ include "switchyard.selectorLabels" (dict "root" .root "component" "engine-shim") }}
switchyard.dev/kv-pool: "true"
{{- else -}}
{{ include "switchyard.selectorLabels" (dict "root" .root "component" .caller) }}
{{- end -}}
{{- end -}}

{{/* A resource name of one component: dict "root" $ "component" name. */}}
{{- define "switchyard.componentName" -}}
{{- printf "%s-%s" (include "switchyard.fullname" .root) .component -}}
{{- end -}}

{{/* The Service that carries a control-plane service's gRPC port: its own, but for the
frontend, whose own Service is the public door (HTTP only) and whose gRPC port is
reached inside the cluster through <fullname>-frontend-internal. */}}
{{- define "switchyard.grpcServiceName" -}}
{{- include "switchyard.componentName" . -}}{{ if eq .component "frontend" }}-internal{{ end -}}
{{- end -}}

{{/* The gRPC address of a control-plane service's Service. */}}
{{- define "switchyard.addr" -}}
{{- $c := index (include "switchyard.components" .root | fromYaml) .component -}}
{{- printf "%s.%s.svc:%v" (include "switchyard.grpcServiceName" .) .root.Release.Namespace $c.grpc -}}
{{- end -}}

{{/* The names after "<fullname>-" of the control plane's objects, by kind, of the kinds an
engine pool's objects take too, as JSON: every service's (whether or not it runs, or has
its PodDisruptionBudget or ServiceMonitor now: kvPool and the rest may be switched on
later) StatefulSet (the replicated ones), Service, PodDisruptionBudget and
ServiceMonitor, the frontend's internal Service, the NetworkPolicies (one per service,
one for all engine shims), and the Secrets the control plane's certificates are written
to or read from. The others (Deployments, Certificates, Issuers) cannot meet a pool's
objects. */}}
{{- define "switchyard.controlPlaneNames" -}}
{{- $svcs := list -}}
{{- range $c, $_ := include "switchyard.components" . | fromYaml -}}
{{- if ne $c "engine-shim" }}{{ $svcs = append $svcs $c }}{{ end -}}
{{- end -}}
{{- $secrets := list "ca" "metrics-ca" "frontend-public-tls" -}}
{{- range $svcs }}{{ $secrets = append $secrets (printf "%s-mtls" .) }}{{ end -}}
{{- toJson (dict
  "StatefulSet" (include "switchyard.replicated" . | fromJsonArray | sortAlpha)
  "Service" (append $svcs "frontend-internal" | sortAlpha)
  "PodDisruptionBudget" (sortAlpha $svcs)
  "ServiceMonitor" (sortAlpha $svcs)
  "NetworkPolicy" (append $svcs "engine-shim" | sortAlpha)
  "Secret" (sortAlpha $secrets)) -}}
{{- end -}}

{{/* The objects of an engine pool by kind, as JSON: what follows "<fullname>-<pool>" in
each one's name. Its StatefulSet, headless Service, PodDisruptionBudget
(engine-pools.yaml) and ServiceMonitor (servicemonitors.yaml) are <fullname>-<pool>, its
extraIngress NetworkPolicy <fullname>-<pool>-extra (networkpolicies.yaml), its podSecrets
Secret <fullname>-<pool>-mtls (poolTLSSecret). Its pods and their claims are named after
its StatefulSet. */}}
{{- define "switchyard.poolNameSuffixes" -}}
{{- toJson (dict "StatefulSet" "" "Service" "" "PodDisruptionBudget" "" "ServiceMonitor" "" "NetworkPolicy" "-extra" "Secret" "-mtls") -}}
{{- end -}}

{{/* Seconds a stopping pod's grace period must leave beyond its preStop sleep and its
service's drain (--shutdown-timeout): servicekit waits up to a second for cut handlers
and a second for its close hooks after the drain, then the process exits; the rest is
the kubelet's own latency. */}}
{{- define "switchyard.graceMargin" -}}5{{- end -}}

{{/* The drain of a Switchyard service on shutdown, in whole seconds rounded up: its
--shutdown-timeout from its flags read as the service reads it (Go's time.ParseDuration:
an optional sign, then numbers each with a unit, "30s", "1m30s", "+1.5m", "1500ms", or
"0"), or servicekit's default (10s) when unset or not positive. The total is taken in
whole nanoseconds, each number's fraction of a nanosecond dropped as Go drops it (so
"0.5ns" is 0, the default), and only then rounded up to seconds; a value Go would refuse
(no unit, or longer than 2562047h47m16.854775807s) is an error: dict "flags" the
service's flags "where" (the values key, for errors). The arithmetic is on decimal
strings and (seconds, nanoseconds) pairs: a duration's nanoseconds may not fit the
templates' integers. */}}
{{- define "switchyard.shutdownSeconds" -}}
{{- $flags := default dict .flags -}}
{{- $secs := 0 -}}
{{- $nanos := 0 -}}
{{- $neg := false -}}
{{- if hasKey $flags "shutdown-timeout" -}}
{{- $s := toString (get $flags "shutdown-timeout") -}}
{{- $num := "([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" -}}
{{- $unit := "(ns|us|µs|μs|ms|s|m|h)" -}}
{{- if not (regexMatch (printf "^[-+]?(0|(%s%s)+)$" $num $unit) $s) -}}
{{- fail (printf "%s.shutdown-timeout: %q is not a duration the service reads (Go's time.ParseDuration: an optional sign, then one or more numbers each with a unit, ns, us, ms, s, m or h, as in 30s, 1m30s or 1500ms; or 0)" .where $s) -}}
{{- end -}}
{{- $neg = hasPrefix "-" $s -}}
{{- /* The largest duration, 2^63-1 ns; a negative one may be 2^63 ns. */}}
{{- $maxSecs := 9223372036 -}}
{{- $maxNanos := ternary 854775808 854775807 $neg -}}
{{- /* A unit's nanoseconds as a power of ten (its number of zeros), or, for m and h,
its seconds. */}}
{{- $zeros := dict "ns" 0 "us" 3 "µs" 3 "μs" 3 "ms" 6 "s" 9 -}}
{{- $unitSecs := dict "m" 60 "h" 3600 -}}
{{- range $part := regexFindAll (printf "%s%s" $num $unit) $s -1 -}}
{{- $n := regexFind (printf "^%s" $num) $part -}}
{{- $u := trimPrefix $n $part -}}
{{- $digits := splitList "." $n -}}
{{- $int := regexReplaceAll "^0+" (first $digits) "" -}}
{{- $frac := "" -}}
{{- if gt (len $digits) 1 }}{{ $frac = index $digits 1 }}{{ end -}}
{{- $ps := 0 -}}
{{- $pn := 0 -}}
{{- if hasKey $zeros $u -}}
{{- /* <int> followed by the unit's zeros is the whole nanoseconds; the first
(zeros) digits of the fraction its fraction's, the rest dropped. */}}
{{- $k := int (get $zeros $u) -}}
{{- $ns := printf "%s%s" $int (repeat $k "0") -}}
{{- if gt (len $ns) 9 -}}
{{- $sp := substr 0 (sub (len $ns) 9 | int) $ns -}}
{{- if gt (len $sp) 11 }}{{ $sp = "99999999999" }}{{ end -}}
{{- $ps = atoi $sp -}}
{{- $ns = substr (sub (len $ns) 9 | int) (len $ns) $ns -}}
{{- end -}}
{{- $pn = add (atoi $ns) (atoi (substr 0 $k (printf "%s%s" $frac (repeat $k "0")))) -}}
{{- else -}}
{{- /* Minutes and hours: whole seconds, and the fraction's nanoseconds from its first
16 (m) or 17 (h) digits (the rest weigh under a millionth of a nanosecond). */}}
{{- $us := int (get $unitSecs $u) -}}
{{- if gt (len $int) 11 }}{{ $int = "99999999999" }}{{ end -}}
{{- $ps = mul (atoi $int) $us -}}
{{- $fn := 0 -}}
{{- if eq $u "m" -}}
{{- $fn = div (mul (atoi (substr 0 16 (printf "%s%s" $frac (repeat 16 "0")))) 6) 1000000 -}}
{{- else -}}
{{- $fn = div (mul (atoi (substr 0 17 (printf "%s%s" $frac (repeat 17 "0")))) 36) 1000000 -}}
{{- end -}}
{{- $ps = add $ps (div $fn 1000000000) -}}
{{- $pn = mod $fn 1000000000 -}}
{{- end -}}
{{- $secs = add $secs $ps -}}
{{- $nanos = add $nanos $pn -}}
{{- if ge $nanos 1000000000 -}}
{{- $secs = add $secs 1 -}}
{{- $nanos = sub $nanos 1000000000 -}}
{{- end -}}
{{- if or (gt $secs $maxSecs) (and (eq $secs $maxSecs) (gt $nanos $maxNanos)) -}}
{{- fail (printf "%s.shutdown-timeout: %q is not a duration the service reads: longer than Go's longest, 2562047h47m16.854775807s" $.where $s) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if or $neg (and (eq $secs 0) (eq $nanos 0)) -}}
{{- 10 -}}
{{- else -}}
{{- add $secs (ternary 1 0 (gt $nanos 0)) -}}
{{- end -}}
{{- end -}}

{{/* The DNS names of a replicated service's pods, <pod>.<service>.<namespace>.svc in
ordinal order, as a JSON list: dict "root" $ "component" name. */}}
{{- define "switchyard.podHosts" -}}
{{- $c := index (include "switchyard.components" .root | fromYaml) .component -}}
{{- $svc := include "switchyard.componentName" . -}}
{{- $hosts := list -}}
{{- range $i := until (int (index .root.Values $c.values).replicas) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc" $svc $i $svc $.root.Release.Namespace) -}}
{{- end -}}
{{- toJson $hosts -}}
{{- end -}}

{{/* The value of a *-addr flag for a control-plane service: every replica's gRPC address,
comma-separated in ordinal order, for a replicated service (switchyard.replicated); its
Service's address otherwise. Every caller gets the same string: frontends pick a session's
scheduler by hashing these names, so they must all spell them alike. */}}
{{- define "switchyard.addrs" -}}
{{- if has .component (include "switchyard.replicated" .root | fromJsonArray) -}}
{{- $c := index (include "switchyard.components" .root | fromYaml) .component -}}
{{- $addrs := list -}}
{{- range $h := include "switchyard.podHosts" . | fromJsonArray -}}
{{- $addrs = append $addrs (printf "%s:%v" $h $c.grpc) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- else -}}
{{- include "switchyard.addr" . -}}
{{- end -}}
{{- end -}}

{{/* A Switchyard image: dict "root" $ "service" name. */}}
{{- define "switchyard.image" -}}
{{- $i := .root.Values.image -}}
{{- $repo := printf "%s/%s" $i.repositoryPrefix .service -}}
{{- if $i.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" $i.registry) $repo }}{{ end -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $i.tag) -}}
{{- end -}}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The mTLS Secret of a control-plane component, or with "metricsCA" the Secret whose
ca.crt Prometheus checks the services with: dict "root" $ "component" name. */}}
{{- define "switchyard.mtlsSecret" -}}
{{- $name := "" -}}
{{- if eq .component "metricsCA" -}}
{{- $name = default (printf "%s-metrics-ca" (include "switchyard.fullname" .root)) .root.Values.tls.secretNames.metricsCA -}}
{{- else -}}
{{- $key := (index (include "switchyard.components" .root | fromYaml) .component).values -}}
{{- $name = default (printf "%s-%s-mtls" (include "switchyard.fullname" .root) .component) (index .root.Values.tls.secretNames $key) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* The issuer of mesh certificates, as a cert-manager issuerRef. */}}
{{- define "switchyard.meshIssuer" -}}
{{- $ref := .Values.tls.certManager.issuerRef -}}
{{- if $ref.name -}}
name: {{ $ref.name }}
kind: {{ $ref.kind }}
group: {{ $ref.group }}
{{- else -}}
name: {{ include "switchyard.fullname" . }}-ca
kind: Issuer
group: cert-manager.io
{{- end -}}
{{- end -}}

{{/* How engine shims get their certificates: csi, podSecrets or volume ("" with mode none). */}}
{{- define "switchyard.shimTLSSource" -}}
{{- $t := .Values.tls -}}
{{- if eq $t.mode "none" -}}
{{- else if $t.engineShims.source -}}
{{- $t.engineShims.source -}}
{{- else if eq $t.mode "certManager" -}}
csi
{{- else -}}
podSecrets
{{- end -}}
{{- end -}}

{{/* The SPIFFE ID of an identity (a service, or "engine-shim/<worker>"). */}}
{{- define "switchyard.spiffeID" -}}
{{- printf "spiffe://%s/switchyard/%s" .root.Values.tls.trustDomain .identity -}}
{{- end -}}

{{/* The engine pools with enginePoolDefaults and engineDefaults.<engine> merged in, as
JSON. Maps merge key by key (deeply), anything else is replaced, so a pool's false, 0 or
[] wins over a default (sprig's merge functions would skip them). */}}
{{- define "switchyard.pools" -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- range $i, $pool := .Values.enginePools -}}
{{- $kind := default "sim" (get $pool "engine") -}}
{{- if not (has $kind (list "sim" "vllm" "sglang")) -}}
{{- fail (printf "enginePools[%d].engine %q: want sim, vllm or sglang" $i $kind) -}}
{{- end -}}
{{- $p := deepCopy $.Values.enginePoolDefaults -}}
{{- if ne $kind "sim" -}}
{{- $p = include "switchyard.merge" (dict "dst" $p "src" (index $.Values.engineDefaults $kind)) | fromJson -}}
{{- end -}}
{{- $p = include "switchyard.merge" (dict "dst" $p "src" $pool) | fromJson -}}
{{- $_ := set $p "engine" $kind -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $p.name)) -}}
{{- fail (printf "enginePools[%d].name %q must be a DNS label" $i $p.name) -}}
{{- end -}}
{{- if hasKey $seen $p.name }}{{ fail (printf "enginePools: two pools are named %q" $p.name) }}{{ end -}}
{{- /* A name clash matters between objects of one kind only. */}}
{{- $cpNames := include "switchyard.controlPlaneNames" $ | fromJson -}}
{{- $suffixes := include "switchyard.poolNameSuffixes" $ | fromJson -}}
{{- range $kind, $suffix := $suffixes -}}
{{- if has (printf "%s%s" $p.name $suffix) (get $cpNames $kind) -}}
{{- $taken := list -}}
{{- range $k, $sfx := $suffixes -}}
{{- range $n := get $cpNames $k -}}
{{- if and (hasSuffix $sfx $n) (ne $n $sfx) }}{{ $taken = append $taken (trimSuffix $sfx $n) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- fail (printf "enginePools[%d].name %q: the pool's %s would be %s-%s%s, already the name of a control-plane object of that kind; name the pool otherwise (not %s)" $i $p.name $kind (include "switchyard.fullname" $) $p.name $suffix (join ", " (uniq $taken | sortAlpha))) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $seen $p.name true -}}
{{- if gt (len (printf "%s-%s" (include "switchyard.fullname" $) $p.name)) 52 -}}
{{- fail (printf "enginePools[%d]: %q is too long for a StatefulSet name (52): shorten the pool name or fullnameOverride" $i (printf "%s-%s" (include "switchyard.fullname" $) $p.name)) -}}
{{- end -}}
{{- if and (ne $kind "sim") (not $p.model) -}}
{{- fail (printf "enginePools[%d] (%s): model is required for engine %s" $i $p.name $kind) -}}
{{- end -}}
{{- /* Stopping: the shim drains (--shutdown-timeout) while its engine still runs (a
native sidecar stops after it; an ordinary container sleeps in its preStop hook, which
Kubernetes refuses at 0 s or beyond the grace period), and all within the grace period. */}}
{{- $drain := int (include "switchyard.shutdownSeconds" (dict "flags" $p.shim.flags "where" (printf "enginePools[%d] (%s).shim.flags" $i $p.name))) -}}
{{- $margin := int (include "switchyard.graceMargin" $) -}}
{{- $grace := int $p.terminationGracePeriodSeconds -}}
{{- if and (ne $kind "sim") (not $p.nativeSidecar) -}}
{{- if lt (int $p.preStopSleepSeconds) $drain -}}
{{- fail (printf "enginePools[%d] (%s): preStopSleepSeconds %d is shorter than the shim's drain (--shutdown-timeout, %d s): with nativeSidecar false the engine waits that long on stop so that the shim's requests in flight can finish" $i $p.name (int $p.preStopSleepSeconds) $drain) -}}
{{- end -}}
{{- if lt $grace (add (int $p.preStopSleepSeconds) $margin | int) -}}
{{- fail (printf "enginePools[%d] (%s): terminationGracePeriodSeconds %d must be at least preStopSleepSeconds (%d) + %d: the engine's preStop sleep must end inside the grace period, with time left for the engine to stop" $i $p.name $grace (int $p.preStopSleepSeconds) $margin) -}}
{{- end -}}
{{- end -}}
{{- if lt $grace (add $drain $margin | int) -}}
{{- fail (printf "enginePools[%d] (%s): terminationGracePeriodSeconds %d must be at least the shim's drain (--shutdown-timeout, %d s) + %d, or the kubelet kills the pod mid-drain" $i $p.name $grace $drain $margin) -}}
{{- end -}}
{{- $out = append $out $p -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "switchyard.merge" -}}
{{- $dst := deepCopy .dst -}}
{{- range $k, $v := .src -}}
{{- if and (kindIs "map" $v) (kindIs "map" (get $dst $k)) -}}
{{- $_ := set $dst $k (include "switchyard.merge" (dict "dst" (get $dst $k) "src" $v) | fromJson) -}}
{{- else -}}
{{- $_ := set $dst $k $v -}}
{{- end -}}
{{- end -}}
{{- toJson $dst -}}
{{- end -}}

{{/* A flag's SWITCHYARD_* variable, as servicekit.EnvName spells it. */}}
{{- define "switchyard.envName" -}}
{{- printf "SWITCHYARD_%s" (. | upper | replace "-" "_" | replace "." "_") -}}
{{- end -}}

{{/* A value as a flag reads it: whole numbers without an exponent (values arrive as
float64, and 50000000 would print as 5e+07). */}}
{{- define "switchyard.flagValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* A log level as the services read it (--log-level, SWITCHYARD_LOG_LEVEL: slog's
Level.UnmarshalText), or fail naming it: DEBUG, INFO, WARN or ERROR in any case (strings.ToUpper,
which also makes the dotless ı, \x{131}, an I), optionally followed by a signed offset
that strconv.Atoi reads (INFO+2, debug-4; its value within int64). No other word (not
WARNING), no space. dict "where" (the values key) "value". Renders nothing. */}}
{{- define "switchyard.checkLogLevel" -}}
{{- $s := toString .value -}}
{{- $words := "DEBUG, INFO, WARN or ERROR, in any case, optionally with a signed offset (INFO+2, debug-4)" -}}
{{- if not (regexMatch `^(?i)(debug|[i\x{131}]nfo|warn|error)([+-][0-9]+)?$` $s) -}}
{{- fail (printf "%s: %q is no log level the services read: %s" .where $s $words) -}}
{{- end -}}
{{- if regexMatch "[+-]" $s -}}
{{- $digits := regexReplaceAll "^[^+-]*[+-]0*" $s "" -}}
{{- $max := ternary "9223372036854775808" "9223372036854775807" (contains "-" $s) -}}
{{- if or (gt (len $digits) 19) (and (eq (len $digits) 19) (gt $digits $max)) -}}
{{- fail (printf "%s: %q is no log level the services read: its offset is beyond %s%s (%s)" .where $s (regexFind "[+-]" $s) $max $words) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The environment of a Switchyard container: dict "root" $ "component" name "specific"
(list of EnvVars the component needs) "flags" (the user's flags) "extraEnv" "where" (the
values key, for errors) "pre" (EnvVars that must come first). A user flag that the chart
sets itself is an error: two values for one flag would leave it to the order of the
list. */}}
{{- define "switchyard.env" -}}
{{- $root := .root -}}
{{- $c := index (include "switchyard.components" $root | fromYaml) .component -}}
{{- $env := concat (default list (get . "pre")) (list
  (dict "name" "SWITCHYARD_GRPC_ADDR" "value" (printf ":%v" $c.grpc))
  (dict "name" "SWITCHYARD_HTTP_ADDR" "value" (printf ":%v" $c.http))
  (dict "name" "SWITCHYARD_HEALTH_ADDR" "value" (printf ":%v" $c.health))) -}}
{{- if eq $root.Values.tls.mode "none" -}}
{{- $env = append $env (dict "name" "SWITCHYARD_INSECURE" "value" "true") -}}
{{- else -}}
{{- $dir := "/etc/switchyard/mtls" -}}
{{- $cert := printf "%s/tls.crt" $dir -}}
{{- $key := printf "%s/tls.key" $dir -}}
{{- if and (eq .component "engine-shim") (eq (include "switchyard.shimTLSSource" $root) "podSecrets") -}}
{{- $cert = printf "%s/$(POD_NAME).crt" $dir -}}
{{- $key = printf "%s/$(POD_NAME).key" $dir -}}
{{- end -}}
{{- $env = concat $env (list
  (dict "name" "SWITCHYARD_TLS_CERT" "value" $cert)
  (dict "name" "SWITCHYARD_TLS_KEY" "value" $key)
  (dict "name" "SWITCHYARD_TLS_CA" "value" (printf "%s/ca.crt" $dir))
  (dict "name" "SWITCHYARD_TRUST_DOMAIN" "value" $root.Values.tls.trustDomain)) -}}
{{- end -}}
{{- $env = concat $env (default list (get . "specific")) -}}
{{- $managed := dict -}}
{{- range $env }}{{ $_ := set $managed .name true }}{{ end -}}
{{- $fromFlags := dict -}}
{{- range $k, $v := (get . "flags") -}}
{{- $n := include "switchyard.envName" $k -}}
{{- if hasKey $managed $n -}}
{{- fail (printf "%s.flags: %q is set by the chart (%s); use the chart's own value for it" $.where $k $n) -}}
{{- end -}}
{{- $env = append $env (dict "name" $n "value" (include "switchyard.flagValue" $v)) -}}
{{- $_ := set $fromFlags $n true -}}
{{- end -}}
{{- /* logLevel is every service's, unless its own flags.log-level says otherwise, in
the words slog reads (a level that does not parse would stop the service at start). */}}
{{- include "switchyard.checkLogLevel" (dict "where" "logLevel" "value" $root.Values.logLevel) -}}
{{- $flags := default dict (get . "flags") -}}
{{- if hasKey $flags "log-level" -}}
{{- include "switchyard.checkLogLevel" (dict "where" (printf "%s.flags.log-level" $.where) "value" (include "switchyard.flagValue" (get $flags "log-level"))) -}}
{{- end -}}
{{- if not (hasKey $fromFlags "SWITCHYARD_LOG_LEVEL") -}}
{{- $env = append $env (dict "name" "SWITCHYARD_LOG_LEVEL" "value" $root.Values.logLevel) -}}
{{- $_ := set $managed "SWITCHYARD_LOG_LEVEL" true -}}
{{- end -}}
{{- if $root.Values.otlp.endpoint -}}
{{- $env = append $env (dict "name" "OTEL_EXPORTER_OTLP_ENDPOINT" "value" $root.Values.otlp.endpoint) -}}
{{- $_ := set $managed "OTEL_EXPORTER_OTLP_ENDPOINT" true -}}
{{- end -}}
{{- /* The grace period is computed from flags.shutdown-timeout: an extraEnv setting its
variable would drain longer (or shorter) than the grace period the chart computed. Any
other variable the chart or the flags set: extraEnv comes last, so it would win over the
chart's value (its ports, TLS files, trust domain) or the flag's without a word. */}}
{{- $seen := dict -}}
{{- range (default list (get . "extraEnv")) -}}
{{- $n := toString (get . "name") -}}
{{- if eq $n "SWITCHYARD_SHUTDOWN_TIMEOUT" -}}
{{- fail (printf "%s.extraEnv: SWITCHYARD_SHUTDOWN_TIMEOUT would change the service's drain behind the grace period the chart computes from its flags; set %s.flags.shutdown-timeout instead" $.where $.where) -}}
{{- else if eq $n "SWITCHYARD_LOG_LEVEL" -}}
{{- fail (printf "%s.extraEnv: SWITCHYARD_LOG_LEVEL is set by the chart from logLevel; set %s.flags.log-level for this service's own" $.where $.where) -}}
{{- else if hasKey $managed $n -}}
{{- fail (printf "%s.extraEnv: %s is set by the chart" $.where $n) -}}
{{- else if hasKey $fromFlags $n -}}
{{- fail (printf "%s.extraEnv: %s is set by a flag already (%s.flags, or the defaults its flags are merged with); set it in one place" $.where $n $.where) -}}
{{- else if hasKey $seen $n -}}
{{- fail (printf "%s.extraEnv: %s is listed twice" $.where $n) -}}
{{- end -}}
{{- $_ := set $seen $n true -}}
{{- end -}}
{{- toYaml (concat $env (default list (get . "extraEnv"))) -}}
{{- end -}}

{{/* The probes, ports and security context of a Switchyard container: dict "root" $
"component" name. */}}
{{- define "switchyard.containerCommon" -}}
{{- $c := index (include "switchyard.components" .root | fromYaml) .component -}}
ports:
  - {name: grpc, containerPort: {{ $c.grpc }}, protocol: TCP}
  - {name: http, containerPort: {{ $c.http }}, protocol: TCP}
  - {name: health, containerPort: {{ $c.health }}, protocol: TCP}
startupProbe:
  grpc: {port: {{ $c.health }}}
  periodSeconds: 2
  failureThreshold: 30
readinessProbe:
  grpc: {port: {{ $c.health }}}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  grpc: {port: {{ $c.health }}}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
securityContext:
  runAsNonRoot: true
  runAsUser: 65534
  runAsGroup: 65534
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
  seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Pod-level settings shared by every pod. */}}
{{- define "switchyard.podCommon" -}}
serviceAccountName: {{ include "switchyard.serviceAccountName" . }}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  fsGroup: 65534
  fsGroupChangePolicy: OnRootMismatch
{{- end -}}

{{/* The objects this release refers to without rendering them, one per line as
"Kind/name (values key): what it must hold". NOTES.txt prints them; the chart's test
checks that they are exactly the references nothing renders. */}}
{{- define "switchyard.userProvided" -}}
{{- $v := .Values -}}
{{- range $v.imagePullSecrets }}
Secret/{{ .name }} (imagePullSecrets[].name): registry credentials
{{- end }}
{{- if and (not $v.serviceAccount.create) $v.serviceAccount.name }}
ServiceAccount/{{ $v.serviceAccount.name }} (serviceAccount.name): the pods' ServiceAccount
{{- end }}
{{- if eq $v.tls.mode "certManager" }}
{{- with $v.tls.certManager.issuerRef }}{{ if .name }}
{{ .kind }}/{{ .name }} (tls.certManager.issuerRef): the cert-manager issuer of every mesh certificate
{{- end }}{{ end }}
{{- end }}
{{- if eq $v.tls.mode "secrets" }}
{{- range $name := include "switchyard.controlPlane" . | fromJsonArray }}
Secret/{{ include "switchyard.mtlsSecret" (dict "root" $ "component" $name) }} (tls.secretNames.{{ (index (include "switchyard.components" $ | fromYaml) $name).values }}): tls.crt, tls.key, ca.crt of {{ include "switchyard.spiffeID" (dict "root" $ "identity" $name) }}{{ if $v.serviceMonitor.enabled }}, also naming DNS {{ include "switchyard.componentName" (dict "root" $ "component" $name) }}.{{ $.Release.Namespace }}.svc for Prometheus{{ end }}
{{- end }}
{{- if $v.serviceMonitor.enabled }}
Secret/{{ include "switchyard.mtlsSecret" (dict "root" $ "component" "metricsCA") }} (tls.secretNames.metricsCA): ca.crt, the mesh CA that Prometheus checks the services' certificates with
{{- end }}
{{- end }}
{{- if eq (include "switchyard.shimTLSSource" .) "csi" }}
{{- with $v.tls.certManager.issuerRef }}{{ if and .name (ne $v.tls.mode "certManager") }}
{{ .kind }}/{{ .name }} (tls.certManager.issuerRef): the cert-manager issuer of the shims' certificates
{{- end }}{{ end }}
{{- end }}
{{- $f := $v.frontend }}
{{- if $f.apiKeys.existingSecret }}
Secret/{{ $f.apiKeys.existingSecret }} (frontend.apiKeys.existingSecret): key {{ $f.apiKeys.key }}, the --api-keys-file (lines "<sha256 of a key> <tenant>")
{{- end }}
{{- if and $f.publicTLS.enabled (not $f.publicTLS.issuerRef.name) }}
Secret/{{ include "switchyard.publicTLSSecret" . }} (frontend.publicTLS.secretName): tls.crt and tls.key of the public HTTPS listener
{{- end }}
{{- if $f.publicTLS.issuerRef.name }}
{{ $f.publicTLS.issuerRef.kind }}/{{ $f.publicTLS.issuerRef.name }} (frontend.publicTLS.issuerRef): the issuer of the public certificate
{{- end }}
{{- range $p := include "switchyard.pools" . | fromJsonArray }}
{{- if eq (include "switchyard.shimTLSSource" $) "podSecrets" }}
Secret/{{ include "switchyard.poolTLSSecret" (dict "root" $ "pool" $p) }} (enginePools[].tlsSecretName): ca.crt and, for every pod <pod> of pool {{ $p.name }} ({{ include "switchyard.fullname" $ }}-{{ $p.name }}-0 to -{{ sub (int $p.replicas) 1 }}), <pod>.crt and <pod>.key of {{ include "switchyard.spiffeID" (dict "root" $ "identity" "engine-shim/<pod>") }}{{ if $.Values.serviceMonitor.enabled }}, also naming DNS {{ include "switchyard.fullname" $ }}-{{ $p.name }}.{{ $.Release.Namespace }}.svc for Prometheus{{ end }}
{{- end }}
{{- if and (ne $p.engine "sim") $p.hfTokenSecret.name }}
Secret/{{ $p.hfTokenSecret.name }} (enginePools[].hfTokenSecret.name): key {{ $p.hfTokenSecret.key }}, a Hugging Face token for pool {{ $p.name }}
{{- end }}
{{- range $p.extraVolumes }}
{{- if hasKey . "secret" }}
Secret/{{ .secret.secretName }} (enginePools[].extraVolumes): volume {{ .name }} of pool {{ $p.name }}
{{- else if hasKey . "configMap" }}
ConfigMap/{{ .configMap.name }} (enginePools[].extraVolumes): volume {{ .name }} of pool {{ $p.name }}
{{- else if hasKey . "persistentVolumeClaim" }}
PersistentVolumeClaim/{{ .persistentVolumeClaim.claimName }} (enginePools[].extraVolumes): volume {{ .name }} of pool {{ $p.name }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "switchyard.publicTLSSecret" -}}
{{- default (printf "%s-frontend-public-tls" (include "switchyard.fullname" .)) .Values.frontend.publicTLS.secretName -}}
{{- end -}}

{{/* The podSecrets Secret of a pool: dict "root" $ "pool" merged pool. */}}
{{- define "switchyard.poolTLSSecret" -}}
{{- default (printf "%s-%s-mtls" (include "switchyard.fullname" .root) .pool.name) .pool.tlsSecretName -}}
{{- end -}}
