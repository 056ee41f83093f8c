{{/* The chart's name, and the objects' name: the release's, with the chart's unless it has it. */}}
{{- define "lakesink.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lakesink.fullname" -}}
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

{{- define "lakesink.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lakesink.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lakesink.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lakesink.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "lakesink.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lakesink.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The config, parsed (as JSON, so that templates can read it back with fromJson), after the
checks that need no cluster: it is TOML, and it leaves to the chart the keys the chart sets.
*/}}
{{- define "lakesink.configJson" -}}
{{- $cfg := fromToml .Values.config -}}
{{- if hasKey $cfg "Error" -}}
{{- fail (printf "config is not valid TOML: %s" (get $cfg "Error")) -}}
{{- end -}}
{{- if not (hasKey $cfg "kafka") -}}
{{- fail "config has no [kafka] section: lakesink needs kafka.brokers and its topics" -}}
{{- end -}}
{{- $service := get $cfg "service" | default dict -}}
{{- if hasKey $service "http-listen" -}}
{{- fail "config sets [service] http-listen: leave it out, the chart listens on 0.0.0.0:<httpPort> (the probes and the Service use that port)" -}}
{{- end -}}
{{- if hasKey $service "shutdown-timeout-ms" -}}
{{- fail "config sets [service] shutdown-timeout-ms: set the value shutdownTimeoutMs instead, which terminationGracePeriodSeconds is derived from" -}}
{{- end -}}
{{- toJson $cfg -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: the shutdown deadline, rounded up to seconds, plus a margin. */}}
{{- define "lakesink.terminationGracePeriodSeconds" -}}
{{- $ms := int64 .Values.shutdownTimeoutMs -}}
{{- if le $ms 0 -}}
{{- fail "shutdownTimeoutMs must be a positive number of milliseconds" -}}
{{- end -}}
{{- add (div (add $ms 999) 1000) (int64 .Values.terminationGraceMarginSeconds) -}}
{{- end -}}
