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
