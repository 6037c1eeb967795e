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
{{- if .Values.expectedDevices.nvidia }}
{{- $_ := set $sources "nvml" (dict "expected_devices" (int .Values.expectedDevices.nvidia)) }}
{{- end }}
{{- $amd := dict }}
{{- if .Values.expectedDevices.amd }}
{{- $_ := set $amd "expected_devices" (int .Values.expectedDevices.amd) }}
{{- end }}
{{- if .Values.amd.stateHostPath }}
{{- $_ := set $amd "state_dir" "/var/lib/accel-exporter" }}
{{- end }}
{{- if $amd }}
{{- $_ := set $sources "amdsmi" $amd }}
{{- end }}
{{- if $sources }}
{{- $_ := set $owned "sources" $sources }}
{{- end }}
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
{{- $_ := set $owned "outputs" (dict "prometheus" $prometheus) }}
{{- end }}
{{- with .Values.workloadPodLabels }}
{{- if .enabled }}
{{- $_ := set $owned "workload" (dict "k8s" (dict "pod_labels" (dict "enabled" true "keys" .keys "interval" .interval))) }}
{{- end }}
{{- end }}
{{- toYaml (mergeOverwrite $config $owned) }}
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

{{/*
The pod's affinity: the user's, plus (unless they gave a nodeAffinity) a required
node affinity matching any accelerator node label (gpuNodeAffinity).
*/}}
{{- define "accel-exporter.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- if and .Values.gpuNodeAffinity.enabled (not (hasKey $affinity "nodeAffinity")) .Values.gpuNodeAffinity.labels }}
{{- $terms := list }}
{{- range $key, $value := .Values.gpuNodeAffinity.labels }}
{{- if $value }}
{{- $terms = append $terms (dict "matchExpressions" (list (dict "key" $key "operator" "In" "values" (list $value)))) }}
{{- else }}
{{- $terms = append $terms (dict "matchExpressions" (list (dict "key" $key "operator" "Exists"))) }}
{{- end }}
{{- end }}
{{- $_ := set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" $terms)) }}
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
