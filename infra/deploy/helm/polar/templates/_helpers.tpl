{{- define "polar.fullname" -}}
{{- printf "%s-polar" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "polar.labels" -}}
app.kubernetes.io/name: polar
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "polar.secretName" -}}
{{- default (printf "%s-secret" (include "polar.fullname" .)) .Values.existingSecret -}}
{{- end -}}

{{- define "polar.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{- define "polar.envFrom" -}}
- configMapRef:
    name: {{ include "polar.fullname" . }}-config
- secretRef:
    name: {{ include "polar.secretName" . }}
{{- end -}}

{{- define "polar.selector" -}}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* egress rules: one per port list of a {ports, peers} value (empty peers: any destination) */}}
{{- define "polar.egressTo" -}}
- ports:
    {{- range .ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
  {{- with .peers }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{- define "polar.dnsEgress" -}}
- ports:
    {{- range .ports }}
    - {port: {{ . }}, protocol: UDP}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
  {{- with .peers }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
