{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "accel-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, or the release name alone when it already contains the chart name. */}}
{{- define "accel-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "accel-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the pods; never change them after the first install. */}}
{{- define "accel-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "accel-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "accel-exporter.labels" -}}
helm.sh/chart: {{ include "accel-exporter.chart" . }}
{{ include "accel-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: accel-exporter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "accel-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "accel-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "accel-exporter.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "accel-exporter.configDir" -}}/etc/accel-exporter/config{{- end }}
{{- /* Where stateHostPath is mounted in the pod (the systemd unit's StateDirectory too). */}}
{{- define "accel-exporter.stateDir" -}}/var/lib/accel-exporter{{- end }}
{{- define "accel-exporter.tlsDir" -}}/etc/accel-exporter/tls{{- end }}
{{- define "accel-exporter.webConfigDir" -}}/etc/accel-exporter/web{{- end }}

{{/*
The daemon's config file: the user's config with the keys the chart owns set on top.
*/}}
{{- define "accel-exporter.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $web := dict "listen_address" (printf ":%d" (int .Values.containerPort)) }}
{{- if .Values.tls.enabled }}
{{- $dir := include "accel-exporter.tlsDir" . }}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) }}
{{- with .Values.tls.clientAuthType }}
{{- $_ := set $tls "client_auth_type" . }}
{{- if ne . "NoClientCert" }}
{{- /* The CA that signs scrapers' certificates: ca.crt of the same Secret (cert-manager writes it). */}}
{{- $_ := set $tls "client_ca_file" (printf "%s/ca.crt" $dir) }}
{{- end }}
{{- end }}
{{- $_ := set $web "tls" $tls }}
{{- end }}
{{- if .Values.webConfigSecret.name }}
{{- $_ := set $web "config_file" (printf "%s/web.yml" (include "accel-exporter.webConfigDir" .)) }}
{{- end }}
{{- $owned := dict "web" $web "log" (dict "format" "json") }}
{{- $sources := dict }}
{{- if .Values.cclInspector.hostPath }}
{{- $_ := set $sources "ccl_inspector" (dict "dir" .Values.cclInspector.hostPath) }}
{{- end }}
{{- if .Values.diag.hostPath }}
{{- $_ := set $sources "diag" (dict "path" .Values.diag.hostPath) }}
{{- end }}
{{- if .Values.expectedDevices.nvidia }}
{{- $_ := set $sources "nvml" (dict "expected_devices" (int .Values.expectedDevices.nvidia)) }}
{{- end }}
{{- $amd := dict }}
{{- if .Values.expectedDevices.amd }}
{{- $_ := set $amd "expected_devices" (int .Values.expectedDevices.amd) }}
{{- end }}
{{- if .Values.stateHostPath }}
{{- $_ := set $amd "state_dir" (include "accel-exporter.stateDir" .) }}
{{- end }}
{{- if $amd }}
{{- $_ := set $sources "amdsmi" $amd }}
{{- end }}
{{- if $sources }}
{{- $_ := set $owned "sources" $sources }}
{{- end }}
{{- $outputs := dict }}
{{- $prometheus := dict }}
{{- with .Values.compat }}
{{- $_ := set $prometheus "compat" . }}
{{- end }}
{{- with .Values.clusterName }}
{{- $_ := set $prometheus "cluster_name" . }}
{{- end }}
{{- if .Values.workloadLabels }}
{{- $_ := set $prometheus "workload_labels" true }}
{{- end }}
{{- if $prometheus }}
{{- $_ := set $outputs "prometheus" $prometheus }}
{{- end }}
{{- $k8s := dict }}
{{- if not (include "accel-exporter.podResources" .) }}
{{- /* The non-root mode: attribution off, said so, instead of permission_denied on every node. */}}
{{- $_ := set $k8s "enabled" false }}
{{- end }}
{{- with .Values.workloadPodLabels }}
{{- if .enabled }}
{{- $_ := set $k8s "pod_labels" (dict "enabled" true "keys" .keys "interval" .interval) }}
{{- end }}
{{- end }}
{{- /* auto: a cluster that serves no resource.k8s.io/v1 leaves DRA inactive, uncounted. */}}
{{- $_ := set $k8s "dra" (dict "enabled" (ternary "auto" false (eq (include "accel-exporter.dra" .) "true"))) }}
{{- if $k8s }}
{{- $_ := set $owned "workload" (dict "k8s" $k8s) }}
{{- end }}
{{- with .Values.kubernetesHealth }}
{{- if .enabled }}
{{- $_ := set $outputs "kubernetes" (dict "enabled" true "taint_effect" .taintEffect "taint_degraded" .taintDegraded "clear_after" .clearAfter "taint_rules" .taintRules "node_condition" .nodeCondition "interval" .interval) }}
{{- end }}
{{- end }}
{{- with .Values.nvsentinel }}
{{- if .enabled }}
{{- $_ := set $outputs "nvsentinel" (dict "enabled" true "socket" (printf "%s/%s" (trimSuffix "/" .socketHostPath) .socketName) "shadow" .shadow "agent" .agent) }}
{{- end }}
{{- end }}
{{- if $outputs }}
{{- $_ := set $owned "outputs" $outputs }}
{{- end }}
{{- if .Values.stateHostPath }}
{{- /* Health findings (XIDs, AFIDs, ...) and the writer's memory survive pod restarts. */}}
{{- $_ := set $owned "health" (dict "state_dir" (include "accel-exporter.stateDir" .)) }}
{{- end }}
{{- toYaml (mergeOverwrite $config $owned) }}
{{- end }}

{{/* "true" when the daemon reads the kubelet socket: attribution as root, with the mount. */}}
{{- define "accel-exporter.podResources" -}}
{{- if and .Values.attribution.root .Values.podResources.enabled -}}
true
{{- end -}}
{{- end }}

{{/* "true" when the daemon lists this node's ResourceSlices (DRA attribution). */}}
{{- define "accel-exporter.dra" -}}
{{- if and (include "accel-exporter.podResources" .) .Values.attribution.dra -}}
true
{{- end -}}
{{- end }}

{{/* "true" when the pod needs its service account token (it reads the API). */}}
{{- define "accel-exporter.apiAccess" -}}
{{- if or .Values.workloadPodLabels.enabled (include "accel-exporter.dra" .) -}}
true
{{- end -}}
{{- end }}

{{/* Scheme Prometheus and the probes use. */}}
{{- define "accel-exporter.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/*
Relabelings shared by the ServiceMonitor and the PodMonitor: the node label, the
instance set to the node name (optional), the job label the shipped rules use,
then the user's own. Argument: the monitor's values.
*/}}
{{- define "accel-exporter.relabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
{{- if .instanceFromNodeName }}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: instance
{{- end }}
{{- if .jobLabel }}
- targetLabel: job
  replacement: {{ .jobLabel | quote }}
{{- end }}
{{- with .relabelings }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The scrape endpoint shared by the ServiceMonitor and the PodMonitor, after its port.
Argument: dict "root" (the chart's context) "m" (the monitor's values).
*/}}
{{- define "accel-exporter.monitorEndpoint" -}}
{{- $m := .m -}}
{{- if and $m.basicAuth $m.authorization }}
{{- fail "set basicAuth or authorization of the monitor, not both: Prometheus accepts one" }}
{{- end -}}
path: /metrics
scheme: {{ include "accel-exporter.scheme" .root }}
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
honorLabels: {{ $m.honorLabels }}
{{- with $m.tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.authorization }}
authorization:
  {{- toYaml . | nindent 2 }}
{{- end }}
relabelings:
  {{- include "accel-exporter.relabelings" $m | nindent 2 }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The label that tells the node kinds' DaemonSets (and their pods) apart. */}}
{{- define "accel-exporter.kindLabel" -}}accel-exporter/node-kind{{- end }}

{{/*
The enabled node kinds, one name a line, highest priority first (then by name).
*/}}
{{- define "accel-exporter.kindNames" -}}
{{- $entries := list }}
{{- range $name, $kind := .Values.nodeKinds }}
{{- if $kind.enabled }}
{{- $entries = append $entries (printf "%07d/%s" (sub 1000000 (int ($kind.priority | default 0))) $name) }}
{{- end }}
{{- end }}
{{- range sortAlpha $entries }}
{{ splitList "/" . | last }}
{{- end }}
{{- end }}

{{/*
One node kind's matchExpressions for "carries none of this kind's labels":
each label NotIn its value (or DoesNotExist for ""). Argument: the kind's values.
*/}}
{{- define "accel-exporter.kindExclusions" -}}
{{- $out := list }}
{{- range $key, $value := .nodeLabels }}
{{- if $value }}
{{- $out = append $out (dict "key" $key "operator" "NotIn" "values" (list $value)) }}
{{- else }}
{{- $out = append $out (dict "key" $key "operator" "DoesNotExist") }}
{{- end }}
{{- end }}
{{- toYaml (dict "items" $out) }}
{{- end }}

{{/*
A node kind's pod affinity: the user's affinity, with a required node affinity whose
terms are (any one of the kind's labels) and (none of a higher kind's labels), so that
a node runs the pod of its highest kind only. A user's required nodeSelectorTerms are
combined with these (each of theirs and each of ours must both match).
Argument: dict "root" (the chart's context) "name" (the kind).
*/}}
{{- define "accel-exporter.affinity" -}}
{{- $root := .root }}
{{- $affinity := deepCopy ($root.Values.affinity | default dict) }}
{{- if $root.Values.gpuNodeAffinity.enabled }}
{{- $kinds := $root.Values.nodeKinds }}
{{- $exclude := list }}
{{- range $higher := include "accel-exporter.kindNames" $root | splitList "\n" | compact }}
{{- if eq $higher $.name }}{{- break }}{{- end }}
{{- $exclude = concat $exclude ((include "accel-exporter.kindExclusions" (index $kinds $higher) | fromYaml).items | default list) }}
{{- end }}
{{- $ours := list }}
{{- range $key, $value := (index $kinds .name).nodeLabels }}
{{- $match := dict "key" $key "operator" "Exists" }}
{{- if $value }}
{{- $match = dict "key" $key "operator" "In" "values" (list $value) }}
{{- end }}
{{- $ours = append $ours (concat (list $match) $exclude) }}
{{- end }}
{{- if $ours }}
{{- $node := deepCopy ($affinity.nodeAffinity | default dict) }}
{{- $theirs := dig "requiredDuringSchedulingIgnoredDuringExecution" "nodeSelectorTerms" list $node }}
{{- $terms := list }}
{{- range $expressions := $ours }}
{{- if $theirs }}
{{- range $term := $theirs }}
{{- $terms = append $terms (merge (dict "matchExpressions" (concat ($term.matchExpressions | default list) $expressions)) (omit $term "matchExpressions")) }}
{{- end }}
{{- else }}
{{- $terms = append $terms (dict "matchExpressions" $expressions) }}
{{- end }}
{{- end }}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" $terms) }}
{{- $_ := set $affinity "nodeAffinity" $node }}
{{- end }}
{{- end }}
{{- if $affinity }}
{{- toYaml $affinity }}
{{- end }}
{{- end }}

{{/*
"true" where the Prometheus Operator's API is served (or assumed): the monitors and
the rule are rendered only then, so a cluster without the operator still installs.
*/}}
{{- define "accel-exporter.operatorApi" -}}
{{- if or .Values.prometheusOperator.assumeInstalled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
true
{{- end -}}
{{- end -}}
