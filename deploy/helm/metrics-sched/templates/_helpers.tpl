{{/* Object names: the release name when it already says metrics-sched, else "<release>-metrics-sched". */}}
{{- define "metrics-sched.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "metrics-sched.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "metrics-sched.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "metrics-sched.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: the ServiceAccount to run as, when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "metrics-sched.certSecret" -}}
{{- default (printf "%s-serving-cert" (include "metrics-sched.fullname" .)) .Values.serving.certSecret -}}
{{- end -}}

{{/* The pods' selector: stable across upgrades (a Deployment's selector cannot change). */}}
{{- define "metrics-sched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metrics-sched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "metrics-sched.labels" -}}
{{ include "metrics-sched.selectorLabels" . }}
app.kubernetes.io/part-of: metrics-sched
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The ServiceAccount as an RBAC subject. */}}
{{- define "metrics-sched.subject" -}}
- kind: ServiceAccount
  name: {{ include "metrics-sched.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* "auto" toggles: on when the cluster serves the kind (helm template: --api-versions). */}}
{{- define "metrics-sched.monitoringEnabled" -}}
{{- $enabled := index . 0 -}}
{{- $kind := index . 1 -}}
{{- $caps := index . 2 -}}
{{- if eq (toString $enabled) "auto" -}}
{{- if $caps.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind) -}}true{{- end -}}
{{- else if $enabled -}}true{{- end -}}
{{- end -}}

{{- define "metrics-sched.cmdbTokenDir" -}}/var/run/secrets/metrics-sched/cmdb{{- end -}}
{{- define "metrics-sched.tlsDir" -}}/etc/metrics-sched/tls{{- end -}}
{{/* serving.selfSigned: where the scheduler writes its own pair (server.certDir), an in-memory emptyDir. */}}
{{- define "metrics-sched.selfSignedDir" -}}/var/run/metrics-sched/serving{{- end -}}

{{/* serving.selfSigned excludes a certificate from elsewhere: say so rather than silently pick one. */}}
{{- define "metrics-sched.selfSigned" -}}
{{- with .Values.serving -}}
{{- if .selfSigned -}}
{{- if or .certManager .certSecret .localhostSAN -}}
{{- fail "serving.selfSigned: the scheduler signs its own pair; unset serving.certManager, serving.certSecret and serving.localhostSAN (they are for a certificate from a Secret)" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The API server's addresses for the NetworkPolicy: the values', else the kubernetes EndpointSlice's (lookup: at
install and upgrade; empty under `helm template`, which then must be given them). */}}
{{- define "metrics-sched.apiServerCidrs" -}}
{{- $cidrs := .Values.networkPolicy.apiServer.cidrs -}}
{{- if not $cidrs -}}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" -}}
{{- range ($slice.endpoints | default list) -}}
{{- range .addresses -}}
{{- $cidrs = append $cidrs (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $cidrs -}}
{{- fail "networkPolicy.apiServer.cidrs: name the API server's addresses (kubectl get endpointslice -n default kubernetes -o jsonpath='{.endpoints[*].addresses[*]}'), or set networkPolicy.enabled=false; the chart reads them from the cluster at install, but `helm template` has no cluster to ask" -}}
{{- end -}}
{{- toJson $cidrs -}}
{{- end -}}

{{/* The scheduler's configuration file (metrics_sched/config/loader.py), from .Values.config and .Values.sources. */}}
{{- define "metrics-sched.config" -}}
{{- $v := .Values -}}
{{- if and $v.config.rebalance.enabled (not $v.rbac.rebalance) -}}
{{- fail "config.rebalance.enabled needs rbac.rebalance: true (the rebalancer evicts through pods/eviction, which only that ClusterRole grants)" -}}
{{- end -}}
{{- $c := deepCopy $v.config.extra -}}
{{- $_ := set $c "apiVersion" "metrics-sched.io/v1alpha1" -}}
{{- $_ := set $c "kind" "MetricsSchedulerConfiguration" -}}
{{- $_ := set $c "profiles" $v.config.profiles -}}
{{- $lease := dict "leaderElect" true "resourceName" (include "metrics-sched.fullname" .) "resourceNamespace" .Release.Namespace -}}
{{- $_ := set $c "leaderElection" (merge $lease (deepCopy $v.config.leaderElection)) -}}
{{- $tls := include "metrics-sched.tlsDir" . -}}
{{- $server := dict "bindAddress" "0.0.0.0" "port" ($v.service.port | int) "tlsCertFile" (printf "%s/tls.crt" $tls) "tlsPrivateKeyFile" (printf "%s/tls.key" $tls) -}}
{{- if include "metrics-sched.selfSigned" . -}}
{{- $server = dict "bindAddress" "0.0.0.0" "port" ($v.service.port | int) "certDir" (include "metrics-sched.selfSignedDir" .) -}}
{{- end -}}
{{- $_ := set $c "server" (merge $server (deepCopy $v.config.server)) -}}
{{- with $v.config.audit }}{{ $_ := set $c "audit" . }}{{ end -}}
{{- with $v.config.metrics }}{{ $_ := set $c "metrics" . }}{{ end -}}
{{- with $v.config.rebalance }}{{ $_ := set $c "rebalance" . }}{{ end -}}
{{- $sources := list -}}
{{- with $v.sources.prometheus -}}
{{- if .enabled -}}
{{- $prometheus := dict "name" .name "type" "prometheus" "url" .url "interval" .interval "timeout" .timeout "metrics" .metrics -}}
{{- if .recordingRules -}}{{- $_ := set $prometheus "recordingRules" true -}}{{- end -}}
{{- $sources = append $sources $prometheus -}}
{{- end -}}
{{- end -}}
{{- with $v.sources.cmdb -}}
{{- if .enabled -}}
{{- $token := printf "%s/%s" (include "metrics-sched.cmdbTokenDir" $) .tokenSecret.key -}}
{{- $sources = append $sources (dict "name" .name "type" "cmdb" "preset" .preset "url" (required "sources.cmdb.url: the CMDB's API URL, when sources.cmdb.enabled" .url) "interval" .interval "auth" (dict "tokenFile" $token)) -}}
{{- end -}}
{{- end -}}
{{- with $v.sources.metricsServer -}}
{{- if .enabled -}}
{{- $sources = append $sources (dict "name" .name "type" "metrics-server" "interval" .interval) -}}
{{- end -}}
{{- end -}}
{{- $sources = concat $sources $v.sources.extra -}}
{{- if $sources }}{{ $_ := set $c "sources" $sources }}{{ end -}}
{{- toYaml $c -}}
{{- end -}}
