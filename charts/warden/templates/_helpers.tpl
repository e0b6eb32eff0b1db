{{/*
Names. Every object name starts with warden.fullname, which is the release
name when it already contains the chart name ("warden" for a release named
"warden"), "<release>-warden" otherwise, or fullnameOverride. Names are cut to
63 characters, the longest a Service or label value may be.
*/}}
{{- define "warden.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warden.fullname" -}}
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

{{/* The controller's Deployment, ClusterRole and ClusterRoleBinding. */}}
{{- define "warden.controller.fullname" -}}
{{- printf "%s-controller" (include "warden.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Service in front of the controller's webhook server. The controller is
told its name (--webhook-service-name) and points the webhook configurations
it creates at it.
*/}}
{{- define "warden.controller.webhookServiceName" -}}
{{- printf "%s-controller-webhook" (include "warden.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warden.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "warden.controller.fullname" .) .Values.controller.serviceAccount.name }}
{{- else }}
{{- required "controller.serviceAccount.name is required when controller.serviceAccount.create is false" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "warden.controller.image" -}}
{{- printf "%s:%s" .Values.controller.image.repository (.Values.controller.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "warden.policyServer.image" -}}
{{- printf "%s:%s" .Values.policyServer.image.repository (.Values.policyServer.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
Labels on every object of the chart: commonLabels, then the chart's own,
which win over commonLabels of the same key.
*/}}
{{- define "warden.labels" -}}
{{- $labels := dict
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-")
  "app.kubernetes.io/name" (include "warden.name" .)
  "app.kubernetes.io/instance" .Release.Name
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "app.kubernetes.io/part-of" "warden" }}
{{- toYaml (merge $labels (deepCopy (.Values.commonLabels | default dict))) }}
{{- end }}

{{/* Labels that select the controller's pods; they never change on upgrade. */}}
{{- define "warden.controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "warden.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{/* Labels of the controller's objects and pods. */}}
{{- define "warden.controller.labels" -}}
{{- $labels := include "warden.labels" . | fromYaml }}
{{- toYaml (merge (include "warden.controller.selectorLabels" . | fromYaml) $labels) }}
{{- end }}

{{/*
The claim of the policy servers' shared cache, empty when there is none.
*/}}
{{- define "warden.policyCache.claimName" -}}
{{- $c := .Values.policyServer.policyCache | default dict -}}
{{- if $c.claimName -}}
{{- $c.claimName -}}
{{- else if $c.create -}}
{{- printf "%s-policy-cache" (include "warden.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The audit scanner's CronJob, ClusterRoles and their bindings. */}}
{{- define "warden.auditScanner.fullname" -}}
{{- printf "%s-audit-scanner" (include "warden.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "warden.auditScanner.serviceAccountName" -}}
{{- if .Values.auditScanner.serviceAccount.create }}
{{- default (include "warden.auditScanner.fullname" .) .Values.auditScanner.serviceAccount.name }}
{{- else }}
{{- required "auditScanner.serviceAccount.name is required when auditScanner.serviceAccount.create is false" .Values.auditScanner.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "warden.auditScanner.image" -}}
{{- printf "%s:%s" .Values.auditScanner.image.repository (.Values.auditScanner.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Labels that mark the audit scanner's objects and pods. */}}
{{- define "warden.auditScanner.labels" -}}
{{- $labels := include "warden.labels" . | fromYaml }}
{{- toYaml (merge (dict "app.kubernetes.io/component" "audit-scanner") $labels) }}
{{- end }}

{{/* The policy syncer's Deployment, ServiceAccount and roles. */}}
{{- define "warden.policySyncer.fullname" -}}
{{- printf "%s-policy-syncer" (include "warden.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "warden.policySyncer.serviceAccountName" -}}
{{- if .Values.policySyncer.serviceAccount.create }}
{{- default (include "warden.policySyncer.fullname" .) .Values.policySyncer.serviceAccount.name }}
{{- else }}
{{- required "policySyncer.serviceAccount.name is required when policySyncer.serviceAccount.create is false" .Values.policySyncer.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "warden.policySyncer.image" -}}
{{- printf "%s:%s" .Values.policySyncer.image.repository (.Values.policySyncer.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Labels that mark the policy syncer's objects and pods. */}}
{{- define "warden.policySyncer.labels" -}}
{{- $labels := include "warden.labels" . | fromYaml }}
{{- toYaml (merge (dict "app.kubernetes.io/component" "policy-syncer") $labels) }}
{{- end }}

{{- define "warden.policySyncer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "warden.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: policy-syncer
{{- end }}
