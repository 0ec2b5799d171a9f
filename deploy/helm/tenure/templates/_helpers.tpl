{{/* Names: every object is prefixed with the release's full name. */}}
{{- define "tenure.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tenure.voters" -}}{{ include "tenure.fullname" . }}-voter{{- end -}}
{{- define "tenure.members" -}}{{ include "tenure.fullname" . }}-member{{- end -}}
{{- define "tenure.peers" -}}{{ include "tenure.fullname" . }}-peers{{- end -}}

{{- define "tenure.labels" -}}
app.kubernetes.io/name: tenure
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tenure.selector" -}}
app.kubernetes.io/name: tenure
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The voters' stable gossip addresses through the headless Service. */}}
{{- define "tenure.seeds" -}}
{{- $voters := include "tenure.voters" . -}}
{{- $peers := include "tenure.peers" . -}}
{{- $port := .Values.ports.gossip -}}
{{- $seeds := list -}}
{{- range $i := until (int .Values.voters.replicas) -}}
{{- $seeds = append $seeds (printf "%s-%d.%s:%v" $voters $i $peers $port) -}}
{{- end -}}
{{- join "," $seeds -}}
{{- end -}}

{{/*
The agent container, shared by voters and members. Call with
(dict "root" $ "role" "voter"|"member").
*/}}
{{- define "tenure.container" -}}
{{- $ := .root -}}
{{- $v := $.Values -}}
{{- $voter := eq .role "voter" -}}
- name: tenure
  image: "{{ $v.image.repository }}:{{ $v.image.tag }}"
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args: ["agent"]
  ports:
    - {name: gossip-tcp, containerPort: {{ $v.ports.gossip }}, protocol: TCP}
    - {name: gossip-udp, containerPort: {{ $v.ports.gossip }}, protocol: UDP}
    - {name: raft, containerPort: {{ $v.ports.raft }}, protocol: TCP}
    - {name: http, containerPort: {{ $v.ports.http }}, protocol: TCP}
  env:
    # HOSTNAME is the pod name: the node id, and the name in its certificate.
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: POD_IP
      valueFrom: {fieldRef: {fieldPath: status.podIP}}
    - name: CLUSTER_NAME
      value: {{ $v.clusterName | quote }}
    - name: TENURE_VOTER
      value: {{ ternary "always" "never" $voter }}
    {{- if $voter }}
    - name: TENURE_VOTERS_OWN_SHARDS
      value: {{ $v.voters.ownShards | quote }}
    - name: TENURE_DATA_DIR
      value: /data
    {{- else }}
    - name: TENURE_DISKLESS
      value: "true"
    {{- end }}
    - name: TENURE_BOOTSTRAP_EXPECT
      value: {{ $v.voters.replicas | quote }}
    - name: TENURE_SEEDS
      value: {{ include "tenure.seeds" $ }}
    - name: TENURE_GOSSIP_ADDR
      value: "0.0.0.0:{{ $v.ports.gossip }}"
    - name: TENURE_GOSSIP_ADVERTISE
      value: "$(POD_IP):{{ $v.ports.gossip }}"
    - name: TENURE_RAFT_ADDR
      value: "0.0.0.0:{{ $v.ports.raft }}"
    - name: TENURE_RAFT_ADVERTISE
      value: "$(POD_IP):{{ $v.ports.raft }}"
    - name: TENURE_HTTP_ADDR
      value: "0.0.0.0:{{ $v.ports.http }}"
    - name: TENURE_PARTITIONS
      value: {{ $v.partitions | quote }}
    - name: TENURE_PROFILE
      value: {{ $v.profile | quote }}
    - name: TENURE_WORKLOAD
      value: "false"
    - name: TENURE_DRAIN_TIMEOUT
      value: {{ $v.drainTimeout | quote }}
    - name: TENURE_LOG_FORMAT
      value: {{ $v.logFormat | quote }}
    - name: TENURE_ENCRYPT
      valueFrom: {secretKeyRef: {name: {{ $v.secrets.gossip }}, key: encrypt}}
    # Tokens by scope (files of one Secret): the agent's write token is the
    # admin scope's, its read token the read scope's. Read by the agent and
    # by `tenure drain` in preStop.
    - name: TENURE_TOKEN_FILE
      value: /secrets/api/admin
    - name: TENURE_READ_TOKEN_FILE
      value: /secrets/api/read
    # The pod's own key and certificate from cert-manager's CSI driver.
    - name: TENURE_TLS_CA
      value: /tls/ca.crt
    - name: TENURE_TLS_CERT
      value: /tls/tls.crt
    - name: TENURE_TLS_KEY
      value: /tls/tls.key
  volumeMounts:
    {{- if $voter }}
    - {name: data, mountPath: /data}
    {{- end }}
    - {name: tls, mountPath: /tls, readOnly: true}
    - {name: api-tokens, mountPath: /secrets/api, readOnly: true}
  readinessProbe:
    httpGet: {path: /readyz, port: http}
    periodSeconds: 5
    failureThreshold: 2
  livenessProbe:
    httpGet: {path: /healthz, port: http}
    initialDelaySeconds: 10
    periodSeconds: 10
    failureThreshold: 6
  lifecycle:
    preStop:
      exec:
        # Hand the shards over before SIGTERM.
        command: ["/tenure", "drain", "--addr", "127.0.0.1:{{ $v.ports.http }}", "--wait", {{ $v.preStopDrainWait | quote }}]
  resources:
    {{- toYaml (ternary $v.voters.resources $v.members.resources $voter) | nindent 4 }}
{{- end -}}

{{/* The pod's volumes other than the voters' data. */}}
{{- define "tenure.volumes" -}}
{{- $v := .Values -}}
- name: tls
  csi:
    driver: csi.cert-manager.io
    readOnly: true
    volumeAttributes:
      csi.cert-manager.io/issuer-name: {{ $v.tls.issuer.name }}
      csi.cert-manager.io/issuer-kind: {{ $v.tls.issuer.kind }}
      csi.cert-manager.io/issuer-group: {{ $v.tls.issuer.group }}
      # tenure's identity: the URI SAN tenure://node/<node id>.
      csi.cert-manager.io/uri-sans: "tenure://node/${POD_NAME}"
      csi.cert-manager.io/common-name: "${POD_NAME}"
      csi.cert-manager.io/key-usages: "digital signature,key encipherment,server auth,client auth"
      csi.cert-manager.io/key-encoding: PKCS8
      csi.cert-manager.io/duration: {{ $v.tls.duration }}
      csi.cert-manager.io/renew-before: {{ $v.tls.renewBefore }}
      csi.cert-manager.io/fs-group: "65532"
- name: api-tokens
  secret:
    secretName: {{ $v.secrets.tokens }}
    defaultMode: 0440
    items:
      - {key: read, path: read}
      - {key: jobs, path: jobs}
      - {key: admin, path: admin}
{{- end -}}

{{/* Annotations for Prometheus' kubernetes_sd pod discovery; empty when off. */}}
{{- define "tenure.podAnnotations" -}}
{{- if .Values.metrics.podAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.ports.http | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}
