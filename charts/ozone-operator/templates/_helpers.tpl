{{- define "ozone-operator.name" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ozone-operator.labels" -}}
app.kubernetes.io/name: ozone-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ozone-operator.selector" -}}
app.kubernetes.io/name: ozone-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ozone-operator.serviceAccount" -}}
{{- default (include "ozone-operator.name" .) .Values.serviceAccount.name -}}
{{- end -}}
