#!/usr/bin/env bash
# The operator and the chart against a real Kubernetes API server: what a
# user does (helm install, kubectl apply, edits, deletes, drains), each step
# an assertion that can fail. Needs KUBECONFIG pointing at a cluster with at
# least 4 schedulable nodes.
#
#   E2E_OPERATOR=host        (default) the operator runs here as a process,
#                            authenticated as the chart's ServiceAccount with
#                            a TokenRequest token: RBAC is exactly the chart's
#   E2E_OPERATOR=in-cluster  the chart's Deployment runs it (kind: the image
#                            must be loaded)
#   E2E_READY_FLAG=1         the cluster's kubelets honour the pod annotation
#                            e2e.ozone-rs.io/ready=false (the fake kubelet of
#                            e2e/control-plane); without it the roll-hold steps
#                            are skipped
#
# Run through e2e/control-plane/up.sh (which sets all three for its fake
# nodes) or e2e/kind/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/tools.sh
source e2e/tools.sh
export PATH=$E2E_BIN:$PATH
mode=${E2E_OPERATOR:-host}
ns=storage
opns=ozone-system
work=${E2E_WORK:-target/e2e}
rm -rf "$work"; mkdir -p "$work"
passed=0; failed=0; current=""
operator_pid=""

log() { printf '%s %s\n' "$(date +%T)" "$*"; }
step() { current=$1; log "== $current"; }
ok() { passed=$((passed + 1)); log "ok: $current${1:+ ($1)}"; }
die() {
  failed=$((failed + 1))
  log "FAILED: $current: $*"
  diagnostics
  echo "$passed passed, $failed failed"
  exit 1
}
diagnostics() {
  {
    kubectl get oz,sts,pods,pvc,pdb -A -o wide || true
    kubectl get oz -A -o yaml || true
    kubectl get sts -A -o yaml || true
    kubectl get events -A --sort-by=.lastTimestamp | tail -40 || true
  } > "$work/diagnostics.txt" 2>&1
  echo "--- diagnostics in $work/diagnostics.txt; operator log tail:"
  tail -25 "$work/operator.log" 2>/dev/null || true
}
# wait_until SECONDS DESCRIPTION CMD...: polls CMD every half second.
wait_until() {
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.5
  done
}
jp() { kubectl get "$@" 2>/dev/null; }
cond() { # cluster type -> status/reason
  jp oz "$1" -n "$ns" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}/{.status.conditions[?(@.type==\"$2\")].reason}"
}
cond_is() { [ "$(cond "$1" "$2")" = "$3" ]; }
dn_selector() { echo "app.kubernetes.io/instance=$1,app.kubernetes.io/component=datanode"; }
ready_pods() { # cluster -> number of Ready datanode pods
  kubectl get pods -n "$ns" -l "$(dn_selector "$1")" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true
}
rolled_out() { # sts -> all replicas updated and ready
  local s; s=$(jp sts "$1" -n "$ns" -o jsonpath='{.spec.replicas} {.status.readyReplicas} {.status.updatedReplicas} {.status.currentRevision} {.status.updateRevision}')
  read -r want ready updated cur upd <<< "$s"
  [ "$want" = "$ready" ] && [ "$want" = "$updated" ] && [ "$cur" = "$upd" ]
}
available() { cond_is "$1" Available True/MinimumReplicasAvailable; }
settled() { # cluster: available, nothing in progress, observed the latest generation
  available "$1" && cond_is "$1" Progressing False/Reconciled \
    && [ "$(jp oz "$1" -n "$ns" -o jsonpath='{.status.observedGeneration}')" = "$(jp oz "$1" -n "$ns" -o jsonpath='{.metadata.generation}')" ] \
    && rolled_out "$1-datanode"
}
patch_oz() { kubectl patch oz "$1" -n "$ns" --type merge -p "$2" >/dev/null; }
bpc() { jp cm "$1-config" -n "$ns" -o jsonpath='{.data.ozone\.conf}' | sed -n 's/^ozone.client.bytes.per.checksum = //p'; }
expect_refused() { # description message-fragment: applies stdin, which must fail with the fragment
  local out
  if out=$(kubectl apply --validate=strict -f - 2>&1); then die "$1 was accepted: $out"; fi
  grep -qF -- "$2" <<< "$out" || die "$1 refused without \"$2\": $out"
}
metric() { curl -sf "http://127.0.0.1:$operator_port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

# --- the operator process -------------------------------------------------
operator_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
operator_start() {
  if [ "$mode" = in-cluster ]; then
    kubectl -n "$opns" scale deploy ozone-operator --replicas 1 >/dev/null
    kubectl -n "$opns" rollout status deploy ozone-operator --timeout 120s >/dev/null
    return
  fi
  local server ca token
  server=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  token=$(kubectl create token ozone-operator -n "$opns" --duration 2h)
  # As the chart's projected volume gives it: a token for the OMs' audience.
  kubectl create token ozone-operator -n "$opns" --duration 2h --audience ozone > "$work/operator.om-token"
  cat > "$work/operator.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$server", certificate-authority: "$ca"}}]
users: [{name: sa, user: {token: "$token"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: sa}}]
current-context: e2e
KC
  KUBECONFIG=$work/operator.kubeconfig WATCH_NAMESPACE="" RUST_LOG=info,ozone_operator=debug \
    OZONE_OPERATOR_IDENTITY="$opns/ozone-operator" OZONE_OPERATOR_OM_TOKEN_FILE="$work/operator.om-token" \
    target/debug/ozone-operator run --http-addr "127.0.0.1:$operator_port" >> "$work/operator.log" 2>&1 &
  operator_pid=$!
  wait_until 60 "the operator's /readyz" curl -sf "http://127.0.0.1:$operator_port/readyz"
}
operator_stop() { # signal
  if [ "$mode" = in-cluster ]; then
    if [ "$1" = KILL ]; then
      kubectl -n "$opns" delete pod -l app.kubernetes.io/name=ozone-operator --grace-period 0 --force >/dev/null 2>&1
    fi
    kubectl -n "$opns" scale deploy ozone-operator --replicas 0 >/dev/null
    return
  fi
  [ -n "$operator_pid" ] || return 0
  kill "-$1" "$operator_pid" 2>/dev/null || true
  # Bounded: SIGKILL after 30 s.
  local end=$((SECONDS + 30))
  while kill -0 "$operator_pid" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$operator_pid/stat" 2>/dev/null)" != Z ]; do
    if [ $SECONDS -ge $end ]; then kill -KILL "$operator_pid" 2>/dev/null || true; break; fi
    sleep 0.1
  done
  wait "$operator_pid" 2>/dev/null || true
  operator_pid=""
}
cleanup() { operator_stop TERM; [ -z "${om_pid:-}" ] || kill "$om_pid" 2>/dev/null || true; }
trap cleanup EXIT

# --- 1. the chart ---------------------------------------------------------
step "helm lint --strict"
helm lint --strict charts/ozone-operator > "$work/lint.txt" 2>&1 || die "$(cat "$work/lint.txt")"
ok

step "helm install (CRD included)"
helm install ozone-operator charts/ozone-operator -n "$opns" --create-namespace \
  --wait --timeout 180s > "$work/helm-install.txt" 2>&1 \
  || die "$(cat "$work/helm-install.txt")"
kubectl get crd ozoneclusters.ozone-rs.io >/dev/null || die "no CRD after helm install"
ok

step "kubectl explain prints the field docs"
explain=$(kubectl explain ozonecluster.spec.datanodes 2>&1) || die "$explain"
grep -q "dataHostPath" <<< "$explain" || die "no dataHostPath in: $explain"
grep -q "one per node" <<< "$explain" || die "no description in: $explain"
ok

step "helm test"
# On the fake nodes of e2e/control-plane run-to-completion pods complete at
# once: what is tested there is the hook (created, admitted, awaited). On
# kind the probe really runs against the operator's Service.
helm test ozone-operator -n "$opns" --timeout 120s > "$work/helm-test.txt" 2>&1 || die "$(cat "$work/helm-test.txt")"
grep -q "Phase:.*Succeeded" "$work/helm-test.txt" || die "$(cat "$work/helm-test.txt")"
ok

# --- 2. the operator, as the chart's ServiceAccount ------------------------
step "RBAC holds only the verbs the code uses"
sa=system:serviceaccount:$opns:ozone-operator
for denied in "update statefulsets" "delete statefulsets" "get configmaps" "list secrets" \
    "update ozoneclusters" "delete ozoneclusters" "create pods" "create customresourcedefinitions" \
    "create tokenreviews.authentication.k8s.io" "bind clusterroles.rbac.authorization.k8s.io/admin" \
    "delete clusterroles.rbac.authorization.k8s.io"; do
  # shellcheck disable=SC2086
  [ "$(kubectl auth can-i $denied -n $ns --as "$sa" 2>/dev/null)" = no ] || die "the chart grants $denied"
done
for allowed in "patch statefulsets" "list pods" "delete pods" "patch ozoneclusters --subresource=status" "create events.events.k8s.io" \
    "patch secrets" "patch networkpolicies.networking.k8s.io" "delete networkpolicies.networking.k8s.io" \
    "patch ozoneclusters" "patch serviceaccounts" "delete configmaps" "list configmaps" \
    "create clusterrolebindings.rbac.authorization.k8s.io" "delete clusterrolebindings.rbac.authorization.k8s.io" \
    "bind clusterroles.rbac.authorization.k8s.io/ozone-operator-tokenreview"; do
  # shellcheck disable=SC2086
  [ "$(kubectl auth can-i $allowed -n $ns --as "$sa" 2>/dev/null)" = yes ] || die "the chart lacks $allowed"
done
ok

step "the operator applies its CRD at start-up (Helm never upgrades crds/)"
if [ "$mode" = in-cluster ]; then kubectl -n "$opns" scale deploy ozone-operator --replicas 0 >/dev/null; fi
# An older schema, as a chart upgrade would leave it.
kubectl patch crd ozoneclusters.ozone-rs.io --type json -p \
  '[{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/progressDeadlineSeconds"}]' >/dev/null
deadline_field() {
  [ -n "$(kubectl get crd ozoneclusters.ozone-rs.io -o jsonpath='{.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.progressDeadlineSeconds.type}')" ]
}
deadline_field && die "the field survived the patch"
operator_start
wait_until 30 "the CRD to be current again" deadline_field
kubectl get crd ozoneclusters.ozone-rs.io -o jsonpath='{.metadata.managedFields[*].manager}' | grep -qw ozone-operator \
  || die "the CRD has no ozone-operator field manager"
ok

# --- 3. the examples --------------------------------------------------------
step "kubectl apply examples/minimal.yaml: Available with observedGeneration"
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# hostPath pods need a namespace whose Pod Security level admits them.
kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=privileged --overwrite >/dev/null
kubectl apply -f examples/minimal.yaml >/dev/null
wait_until 180 "ozone to settle" settled ozone
gen=$(jp oz ozone -n "$ns" -o jsonpath='{.metadata.generation}')
for t in Available Progressing Degraded; do
  g=$(jp oz ozone -n "$ns" -o jsonpath="{.status.conditions[?(@.type==\"$t\")].observedGeneration}")
  [ "$g" = "$gen" ] || die "condition $t has observedGeneration $g, generation is $gen"
done
cond_is ozone Degraded False/AsExpected || die "Degraded: $(cond ozone Degraded)"
ok

step "every child has the cluster as controller owner"
uid=$(jp oz ozone -n "$ns" -o jsonpath='{.metadata.uid}')
for obj in configmap/ozone-config service/ozone-om service/ozone-om-headless service/ozone-datanode-headless \
    statefulset/ozone-om statefulset/ozone-datanode poddisruptionbudget/ozone-datanode; do
  owner=$(jp "$obj" -n "$ns" -o jsonpath='{.metadata.ownerReferences[?(@.controller==true)].uid}')
  [ "$owner" = "$uid" ] || die "$obj is not owned by the cluster (owner '$owner')"
done
jp poddisruptionbudget ozone-om -n "$ns" -o name | grep -q . && die "a PDB for the single OM exists"
[ "$(jp pdb ozone-datanode -n "$ns" -o jsonpath='{.spec.unhealthyPodEvictionPolicy}')" = AlwaysAllow ] \
  || die "the datanode PDB does not let unhealthy pods be evicted"
ok

step "one datanode per node (required anti-affinity, real scheduler)"
nodes=$(kubectl get pods -n "$ns" -l "$(dn_selector ozone)" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}')
[ "$(sort -u <<< "$nodes" | grep -c .)" = 3 ] || die "datanodes on nodes: $nodes"
ok

step "kubectl get oz shows the printer columns"
table=$(kubectl get oz -n "$ns")
head -1 <<< "$table" | grep -q "DATANODES *OM *AVAILABLE *AGE" || die "$table"
grep -Eq "^ozone +3/3 +1/1 +True" <<< "$table" || die "$table"
ok

step "kubectl apply examples/production.yaml: children, host directories prepared"
kubectl apply -f examples/production.yaml >/dev/null
wait_until 60 "the production StatefulSets" jp sts ozone-prod-datanode -n "$ns" -o name
# Its CA bundle goes to the client namespace hbase too, which does not exist
# yet: Degraded, saying so, without holding back the pods; then it comes.
wait_until 60 "Degraded/ApplyFailed for the missing namespace" cond_is ozone-prod Degraded True/ApplyFailed
msg=$(jp oz ozone-prod -n "$ns" -o jsonpath='{.status.conditions[?(@.type=="Degraded")].message}')
grep -q 'ConfigMap hbase/ozone-prod-ca-bundle: namespaces "hbase" not found' <<< "$msg" || die "message: $msg"
kubectl create namespace hbase >/dev/null
wait_until 120 "the CA bundle in hbase" jp cm ozone-prod-ca-bundle -n hbase -o name
wait_until 60 "Degraded cleared" cond_is ozone-prod Degraded False/AsExpected
init=$(jp sts ozone-prod-datanode -n "$ns" -o jsonpath='{.spec.template.spec.initContainers[0].command}')
grep -q '"--data-dir","/host-data/storage-ozone-prod"' <<< "$init" || die "init step: $init"
grep -q '"--socket-dir","/var/lib/ozone/sockets"' <<< "$init" || die "init step: $init"
grep -q '"sh"' <<< "$init" && die "the init step runs a shell: $init"
sub=$(jp sts ozone-prod-datanode -n "$ns" -o jsonpath='{.spec.template.spec.containers[0].volumeMounts[?(@.name=="data")].subPath}')
[ "$sub" = storage-ozone-prod ] || die "data subPath '$sub'"
for c in initContainers containers; do
  drops=$(jp sts ozone-prod-datanode -n "$ns" -o jsonpath="{.spec.template.spec.$c[*].securityContext.capabilities.drop}")
  seccomp=$(jp sts ozone-prod-datanode -n "$ns" -o jsonpath="{.spec.template.spec.$c[*].securityContext.seccompProfile.type}")
  grep -q ALL <<< "$drops" || die "$c do not drop ALL capabilities"
  grep -q RuntimeDefault <<< "$seccomp" || die "$c have no seccomp profile"
done
wait_until 180 "ozone-prod to be Available" available ozone-prod
pnodes=$(kubectl get pods -n "$ns" -l "$(dn_selector ozone-prod)" -o jsonpath='{range .items[?(@.spec.nodeName)]}{.spec.nodeName}{"\n"}{end}')
[ "$(sort -u <<< "$pnodes" | grep -c .)" = "$(grep -c . <<< "$pnodes")" ] || die "two prod datanodes share a node: $pnodes"
ok

step "a resync applies nothing new (resourceVersions unchanged)"
versions() {
  kubectl get cm,svc,sts,pdb -n "$ns" -l app.kubernetes.io/managed-by=ozone-operator \
    -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}' | sort
}
wait_until 60 "prod to stop changing" bash -c "[ \"\$(kubectl get sts -n $ns -o jsonpath='{.items[*].metadata.resourceVersion}')\" = \"\$(sleep 3; kubectl get sts -n $ns -o jsonpath='{.items[*].metadata.resourceVersion}')\" ]"
before=$(versions)
operator_stop TERM
operator_start
if [ "$mode" = host ]; then
  wait_until 60 "a reconcile of each cluster" bash -c "[ \"\$(curl -sf http://127.0.0.1:$operator_port/metrics | awk '\$1 == \"ozone_operator_reconciles_total\" {print \$2}')\" -ge 2 ]"
fi
sleep 3
after=$(versions)
[ "$before" = "$after" ] || die "objects changed on resync: $(diff <(echo "$before") <(echo "$after"))"
ok

step "TLS: the operator's CA signs a certificate for the OM and every pod, and renews it"
secret_pem() { jp secret "$1" -n "$ns" -o jsonpath="{.data.${2//./\\.}}" | base64 -d; }
wait_until 60 "the TLS Secret" jp secret ozone-prod-tls -n "$ns" -o name
[ "$(jp secret ozone-prod-tls -n "$ns" -o jsonpath='{.type}')" = kubernetes.io/tls ] || die "TLS Secret type"
secret_pem ozone-prod-tls ca.crt > "$work/ca.crt"
secret_pem ozone-prod-tls tls.crt > "$work/tls.crt"
cmp -s "$work/ca.crt" <(secret_pem ozone-prod-ca ca.crt) || die "the TLS Secret's CA is not the CA Secret's"
openssl verify -CAfile "$work/ca.crt" "$work/tls.crt" > /dev/null || die "the certificate does not verify against the CA"
sans=$(openssl x509 -in "$work/tls.crt" -noout -ext subjectAltName)
for n in ozone-prod-om.storage.svc '*.ozone-prod-datanode-headless.storage.svc' '*.ozone-prod-om-headless.storage.svc'; do
  grep -qF "DNS:$n" <<< "$sans" || die "no $n in $sans"
done
jp sts ozone-prod-datanode -n "$ns" -o jsonpath='{.spec.template.spec.containers[0].args}' \
  | grep -qF '$(POD_NAME).ozone-prod-datanode-headless.storage.svc' || die "datanodes do not advertise their DNS names"
# Due for renewal (as if a third of its life were left), then a spec change
# wakes the controller: a new certificate from the same CA, valid 30 days.
kubectl annotate secret ozone-prod-tls -n "$ns" ozone-rs.io/not-after=1 --overwrite >/dev/null
patch_oz ozone-prod '{"spec":{"security":{"tls":{"certificateDays":30}}}}'
renewed() { ! cmp -s "$work/tls.crt" <(secret_pem ozone-prod-tls tls.crt); }
wait_until 60 "a renewed certificate" renewed
secret_pem ozone-prod-tls tls.crt > "$work/tls2.crt"
openssl verify -CAfile "$work/ca.crt" "$work/tls2.crt" > /dev/null || die "the renewed certificate does not verify"
openssl x509 -in "$work/tls2.crt" -noout -checkend $((29 * 86400)) > /dev/null || die "renewed for less than 29 days"
openssl x509 -in "$work/tls2.crt" -noout -checkend $((31 * 86400)) > /dev/null && die "renewed for more than 31 days"
ok "renewed"

step "NetworkPolicies: accepted by the API server, removed when turned off"
for p in ozone-prod-om ozone-prod-datanode; do
  jp networkpolicy "$p" -n "$ns" -o name | grep -q . || die "NetworkPolicy $p missing"
done
[ "$(jp networkpolicy ozone-prod-om -n "$ns" -o jsonpath='{.spec.ingress[0].ports[0].port}')" = 9862 ] || die "OM policy port"
[ "$(jp networkpolicy ozone-prod-datanode -n "$ns" -o jsonpath='{.spec.ingress[1].from[1].namespaceSelector.matchLabels.kubernetes\.io/metadata\.name}')" = monitoring ] \
  || die "datanode metrics policy"
[ "$(jp oz ozone-prod -n "$ns" -o jsonpath='{.status.networkPolicies}')" = true ] || die "status.networkPolicies"
patch_oz ozone-prod '{"spec":{"security":{"networkPolicies":{"enabled":false}}}}'
wait_until 60 "the policies gone" bash -c "[ -z \"\$(kubectl get networkpolicy -n $ns -o name | grep ozone-prod)\" ]"
patch_oz ozone-prod '{"spec":{"security":{"networkPolicies":{"enabled":true}}}}'
wait_until 60 "the policies back" jp networkpolicy ozone-prod-datanode -n "$ns" -o name
ok

# --- 4. invalid resources refused by the API server ------------------------
step "invalid resources are refused with the CRD's messages"
expect_refused "THREE with 2 datanodes" "replication THREE needs at least 3 datanodes" <<'Y'
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: bad, namespace: storage}
spec: {datanodes: {replicas: 2}}
Y
expect_refused "negative replicas" "should be greater than or equal to 1" <<'Y'
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: bad, namespace: storage}
spec: {replication: ONE, datanodes: {replicas: -1}}
Y
expect_refused "cpu: lots" "must be a Kubernetes quantity" <<'Y'
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: bad, namespace: storage}
spec: {datanodes: {resources: {requests: {cpu: lots}}}}
Y
expect_refused "size 10 GiB" "must be a positive Kubernetes quantity" <<'Y'
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: bad, namespace: storage}
spec: {datanodes: {storage: {size: 10 GiB}}}
Y
expect_refused "an unknown field (--validate=strict)" 'unknown field "spec.datanode"' <<'Y'
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: bad, namespace: storage}
spec: {datanode: {replicas: 3}}
Y
for name in ozone.prod 1ozone a-name-that-is-much-too-long-for-its-children-x; do
  expect_refused "name $name" "must be a DNS-1035 label" <<Y
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: $name, namespace: storage}
spec: {}
Y
done
for path in / /etc /etc/ozone-sockets /data /var/lib/kubelet/x /var/lib/../../etc; do
  expect_refused "socketHostPath $path" "outside system directories" <<Y
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: bad, namespace: storage}
spec: {shortCircuit: {socketHostPath: "$path"}}
Y
done
expect_refused 'socketHostPath with ; and $' "should match" <<'Y'
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: bad, namespace: storage}
spec: {shortCircuit: {socketHostPath: "/var/lib/x;rm -rf $HOME"}}
Y
# 43 characters is the longest name whose children are valid.
long=a-name-of-exactly-forty-three-characters-xy
[ ${#long} = 43 ] || die "test name is ${#long} characters"
kubectl apply --dry-run=server -f - >/dev/null <<Y || die "a 43-character name or valid quantities (500e6, 1Ei, cpu: 2) were refused"
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: $long, namespace: storage}
spec: {om: {storage: {size: "500e6"}}, datanodes: {storage: {size: 1Ei}, resources: {requests: {cpu: 2, memory: 8Gi}}}}
Y
ok

step "render refuses offline what the API server refuses"
printf 'apiVersion: ozone-rs.io/v1alpha1\nkind: OzoneCluster\nmetadata: {name: bad, namespace: storage}\nspec: {datanode: {replicas: 3}}\n' > "$work/bad-field.yaml"
printf 'apiVersion: ozone-rs.io/v1alpha1\nkind: OzoneCluster\nmetadata: {name: bad, namespace: storage}\nspec: {datanodes: {storage: {size: 10 GiB}}}\n' > "$work/bad-size.yaml"
printf 'apiVersion: ozone-rs.io/v1alpha1\nkind: OzoneCluster\nmetadata: {name: ozone.prod, namespace: storage}\nspec: {}\n' > "$work/bad-name.yaml"
for f in bad-field:'unknown field "spec.datanode"' bad-size:"positive Kubernetes quantity" bad-name:"DNS-1035"; do
  out=$(target/debug/ozone-operator render -f "$work/${f%%:*}.yaml" 2>&1) && die "render accepted ${f%%:*}"
  grep -qF "${f#*:}" <<< "$out" || die "render of ${f%%:*}: $out"
done
ok

step "fields the API server will not change in place are refused at admission"
out=$(kubectl patch oz ozone -n "$ns" --type merge -p '{"spec":{"datanodes":{"storage":{"size":"20Gi"}}}}' 2>&1) \
  && die "storage size change accepted"
grep -q "storage cannot be changed after creation" <<< "$out" || die "$out"
out=$(kubectl patch oz ozone -n "$ns" --type merge -p '{"spec":{"om":{"storage":{"storageClassName":"other"}}}}' 2>&1) \
  && die "storage class change accepted"
grep -q "storage cannot be changed after creation" <<< "$out" || die "$out"
out=$(kubectl patch oz ozone-prod -n "$ns" --type merge -p '{"spec":{"datanodes":{"dataHostPath":"/mnt/other"}}}' 2>&1) \
  && die "dataHostPath change accepted"
grep -q "dataHostPath cannot be changed" <<< "$out" || die "$out"
ok

# The production example is done with; its claims stay (Retain).
kubectl delete oz ozone-prod -n "$ns" --wait --timeout 120s >/dev/null

# --- 5. edits -----------------------------------------------------------------
uids() { kubectl get pods -n "$ns" -l "$(dn_selector "$1")" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}' | sort; }
step "a config change rolls the datanodes one at a time, readiness-gated"
before=$(uids ozone)
patch_oz ozone '{"spec":{"checksum":{"bytesPerChecksum":65536}}}'
most_down=0
end=$((SECONDS + 180))
while ! settled ozone || [ "$(uids ozone)" = "$before" ]; do
  [ $SECONDS -lt $end ] || die "roll did not finish"
  down=$((3 - $(ready_pods ozone)))
  [ $down -gt $most_down ] && most_down=$down
  sleep 0.3
done
[ "$most_down" -le 1 ] || die "$most_down datanodes were down at once"
[ "$(bpc ozone)" = 65536 ] || die "ConfigMap has bytes.per.checksum $(bpc ozone)"
after=$(uids ozone)
[ -z "$(comm -12 <(echo "$before") <(echo "$after"))" ] || die "pods not replaced: $(comm -12 <(echo "$before") <(echo "$after"))"
ok "at most $most_down down"

step "scale 3 -> 4 -> 3: the scale-down waits for the OM to decommission the datanode that goes"
patch_oz ozone '{"spec":{"datanodes":{"replicas":4}}}'
wait_until 120 "4 ready datanodes" bash -c "[ \$(kubectl get sts ozone-datanode -n $ns -o jsonpath='{.status.readyReplicas}') = 4 ]"
wait_until 60 "settled at 4" settled ozone
patch_oz ozone '{"spec":{"datanodes":{"replicas":3}}}'
# No OM runs behind these fake kubelets: the decommission cannot finish, so
# the StatefulSet keeps its 4 pods and the status says why.
wait_until 60 "Progressing/Decommissioning" cond_is ozone Progressing True/Decommissioning
kubectl get pod ozone-datanode-3 -n "$ns" >/dev/null || die "ozone-datanode-3 went before it was decommissioned"
[ "$(kubectl get sts ozone-datanode -n "$ns" -o jsonpath='{.spec.replicas}')" = 4 ] || die "the StatefulSet was lowered before the decommission"
kubectl get ozonecluster ozone -n "$ns" -o jsonpath='{.status.conditions[?(@.type=="Progressing")].message}' | grep -q "ozone-datanode-3" \
  || die "the Progressing message does not name ozone-datanode-3"
# Turned off, the pod goes at once (the OM re-replicates after its dead interval).
patch_oz ozone '{"spec":{"datanodes":{"decommissionOnScaleDown":false}}}'
wait_until 120 "ozone-datanode-3 gone" bash -c "! kubectl get pod ozone-datanode-3 -n $ns"
wait_until 60 "settled at 3" settled ozone
jp pvc data-ozone-datanode-3 -n "$ns" -o name | grep -q . || die "scale-down deleted the claim of ozone-datanode-3"
ok

if [ -n "${E2E_READY_FLAG:-}" ]; then
step "a Pending pod the new template fixes gets it; stalled progress becomes Degraded"
free=$(comm -23 <(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort) \
  <(kubectl get pods -n "$ns" -l "$(dn_selector ozone)" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort) | head -1)
[ -n "$free" ] || die "no node without a datanode"
kubectl taint nodes "$free" dedicated=storage:NoSchedule --overwrite >/dev/null
patch_oz ozone '{"spec":{"progressDeadlineSeconds":15,"datanodes":{"replicas":4}}}'
wait_until 60 "ozone-datanode-3 Pending" bash -c "[ \"\$(kubectl get pod ozone-datanode-3 -n $ns -o jsonpath='{.status.phase}')\" = Pending ]"
wait_until 60 "Degraded/ProgressDeadlineExceeded" cond_is ozone Degraded True/ProgressDeadlineExceeded
cond_is ozone Progressing False/ProgressDeadlineExceeded || die "Progressing: $(cond ozone Progressing)"
available ozone || die "the cluster lost availability"
patch_oz ozone '{"spec":{"datanodes":{"tolerations":[{"key":"dedicated","operator":"Equal","value":"storage","effect":"NoSchedule"}]}}}'
wait_until 120 "ozone-datanode-3 ready on $free" bash -c "[ \"\$(kubectl get pod ozone-datanode-3 -n $ns -o jsonpath='{.spec.nodeName}/{.status.conditions[?(@.type==\"Ready\")].status}')\" = $free/True ]"
wait_until 120 "settled with the toleration" settled ozone
cond_is ozone Degraded False/AsExpected || die "Degraded: $(cond ozone Degraded)"
patch_oz ozone '{"spec":{"datanodes":{"replicas":3}}}'
wait_until 120 "settled at 3" settled ozone
kubectl taint nodes "$free" dedicated- >/dev/null
ok
fi

step "paused: nothing applied, status kept; resumed: applied"
patch_oz ozone '{"spec":{"clusterOperation":{"reconciliationPaused":true},"checksum":{"bytesPerChecksum":32768}}}'
wait_until 30 "Progressing/ReconciliationPaused" cond_is ozone Progressing False/ReconciliationPaused
sleep 2
[ "$(bpc ozone)" = 65536 ] || die "a paused cluster's ConfigMap changed to $(bpc ozone)"
patch_oz ozone '{"spec":{"clusterOperation":{"reconciliationPaused":false}}}'
wait_until 30 "the ConfigMap after resuming" bash -c "kubectl get cm ozone-config -n $ns -o jsonpath='{.data.ozone\.conf}' | grep -q 'bytes.per.checksum = 32768'"
wait_until 180 "settled after resuming" settled ozone
ok

step "stopped: every pod goes, claims stay; started again"
patch_oz ozone '{"spec":{"clusterOperation":{"stopped":true}}}'
wait_until 120 "no pods" bash -c "[ -z \"\$(kubectl get pods -n $ns -l app.kubernetes.io/instance=ozone -o name)\" ]"
wait_until 30 "Available/Stopped" cond_is ozone Available False/Stopped
for claim in data-ozone-om-0 data-ozone-datanode-0 data-ozone-datanode-1 data-ozone-datanode-2; do
  jp pvc "$claim" -n "$ns" -o name | grep -q . || die "claim $claim went with the pods"
done
patch_oz ozone '{"spec":{"clusterOperation":{"stopped":false}}}'
wait_until 180 "settled after starting" settled ozone
ok

step "a refused apply is Degraded with the server's message, an event, and the rest applied"
patch_oz ozone '{"spec":{"checksum":{"bytesPerChecksum":16384},"datanodes":{"podOverrides":{"spec":{"restartPolicy":"Never"}}}}}'
wait_until 60 "Degraded/ApplyFailed" cond_is ozone Degraded True/ApplyFailed
msg=$(jp oz ozone -n "$ns" -o jsonpath='{.status.conditions[?(@.type=="Degraded")].message}')
grep -q "StatefulSet ozone-datanode" <<< "$msg" || die "message: $msg"
grep -q "restartPolicy" <<< "$msg" || die "message without the server's words: $msg"
[ "$(bpc ozone)" = 16384 ] || die "the ConfigMap was not applied beside the refused StatefulSet"
om_hash=$(jp sts ozone-om -n "$ns" -o jsonpath='{.spec.template.metadata.annotations.ozone-rs\.io/config-hash}')
dn_hash=$(jp sts ozone-datanode -n "$ns" -o jsonpath='{.spec.template.metadata.annotations.ozone-rs\.io/config-hash}')
[ "$om_hash" != "$dn_hash" ] || die "the refused datanode StatefulSet changed"
wait_until 30 "an ApplyFailed event" bash -c "kubectl get events.events.k8s.io -n $ns -o jsonpath='{range .items[*]}{.reason} {.regarding.name}{\"\\n\"}{end}' | grep -q '^ApplyFailed ozone$'"
patch_oz ozone '{"spec":{"datanodes":{"podOverrides":null}}}'
wait_until 180 "settled after the fix" settled ozone
cond_is ozone Degraded False/AsExpected || die "Degraded: $(cond ozone Degraded)"
ok

if [ -n "${E2E_READY_FLAG:-}" ]; then
step "operator restart during a held roll: picks up, no pod replaced twice"
kubectl annotate pod ozone-datanode-0 -n "$ns" e2e.ozone-rs.io/ready=false --overwrite >/dev/null
wait_until 30 "ozone-datanode-0 unready" bash -c "[ \$(kubectl get sts ozone-datanode -n $ns -o jsonpath='{.status.readyReplicas}') = 2 ]"
kubectl get pods -n "$ns" -l "$(dn_selector ozone)" -w -o jsonpath='{.metadata.name}={.metadata.uid}{"\n"}' > "$work/pod-watch.txt" 2>/dev/null &
watcher=$!
patch_oz ozone '{"spec":{"checksum":{"bytesPerChecksum":8192}}}'
wait_until 30 "Progressing/RollHeld" cond_is ozone Progressing False/RollHeld
held=$(jp sts ozone-datanode -n "$ns" -o jsonpath='{.spec.updateStrategy.rollingUpdate.partition}')
[ "$held" = 3 ] || die "partition $held while held"
operator_stop KILL
sleep 3
operator_start
sleep 5
cond_is ozone Progressing False/RollHeld || die "after restart: $(cond ozone Progressing)"
[ "$(sort -u "$work/pod-watch.txt" | grep -c .)" = 3 ] || die "a pod was replaced while held: $(sort -u "$work/pod-watch.txt")"
kubectl annotate pod ozone-datanode-0 -n "$ns" e2e.ozone-rs.io/ready- >/dev/null
wait_until 180 "the roll after the hold" settled ozone
sleep 1
kill "$watcher" 2>/dev/null || true
wait "$watcher" 2>/dev/null || true
for i in 0 1 2; do
  n=$(sort -u "$work/pod-watch.txt" | grep -c "^ozone-datanode-$i=")
  [ "$n" = 2 ] || die "ozone-datanode-$i had $n incarnations (want 2): $(sort -u "$work/pod-watch.txt")"
done
[ "$(bpc ozone)" = 8192 ] || die "ConfigMap has $(bpc ozone)"
ok
fi

# --- 8. drains ------------------------------------------------------------------
step "drain a node: PDBs let it through (replication THREE and ONE)"
kubectl apply -f - >/dev/null <<'Y'
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: ozone-one, namespace: storage}
spec: {replication: ONE, datanodes: {replicas: 1}, volumeDeletionPolicy: Delete}
Y
wait_until 180 "ozone-one to settle" settled ozone-one
target=$(jp pod ozone-one-datanode-0 -n "$ns" -o jsonpath='{.spec.nodeName}')
start=$SECONDS
kubectl drain "$target" --ignore-daemonsets --delete-emptydir-data --timeout 120s > "$work/drain.txt" 2>&1 \
  || die "drain of $target: $(tail -5 "$work/drain.txt")"
took=$((SECONDS - start))
kubectl uncordon "$target" >/dev/null
wait_until 180 "ozone to settle after the drain" settled ozone
wait_until 180 "ozone-one to settle after the drain" settled ozone-one
ok "$target drained in ${took}s"

# --- 7. deletion ------------------------------------------------------------------
step "deleting a cluster: the garbage collector removes the children; claims follow volumeDeletionPolicy"
jp pvc data-ozone-one-datanode-0 -n "$ns" -o name | grep -q . || die "ozone-one has no datanode claim"
kubectl delete oz ozone-one -n "$ns" --wait --timeout 120s >/dev/null
wait_until 120 "ozone-one's children gone" bash -c "[ -z \"\$(kubectl get cm,svc,sts,pdb,pods -n $ns -l app.kubernetes.io/instance=ozone-one -o name)\" ]"
wait_until 120 "ozone-one's claims gone (Delete)" bash -c "[ -z \"\$(kubectl get pvc -n $ns -o name | grep ozone-one)\" ]"
jp pvc data-ozone-prod-om-0 -n "$ns" -o name | grep -q . || die "ozone-prod's claim went (Retain)"
ok

# --- 9. Kubernetes identities -------------------------------------------------
step "spec.security.authentication: the OM's ServiceAccount and TokenReview binding, CA bundles, a finalizer"
mkdir -p "$work/security"
sec=$(cd "$work/security" && pwd)
for n in tenant-a tenant-b; do kubectl create namespace "$n" >/dev/null; done
kubectl create sa app -n tenant-a >/dev/null
kubectl create sa app -n tenant-b >/dev/null
kubectl create sa gone -n tenant-a >/dev/null
kubectl create sa admin -n "$opns" >/dev/null
kubectl apply -f - >/dev/null <<Y
apiVersion: ozone-rs.io/v1alpha1
kind: OzoneCluster
metadata: {name: ozone-secure, namespace: $ns}
spec:
  replication: ONE
  datanodes: {replicas: 1}
  volumeDeletionPolicy: Delete
  security:
    blockTokens: true
    authentication: {enabled: true, administrators: ["$opns/admin"]}
    tls: {enabled: true, clientNamespaces: [tenant-a, tenant-b]}
Y
wait_until 180 "ozone-secure to settle" settled ozone-secure
binding=ozone-rs:$ns:ozone-secure:tokenreview
[ "$(jp oz ozone-secure -n "$ns" -o jsonpath='{.metadata.finalizers}')" = '["ozone-rs.io/cleanup"]' ] \
  || die "finalizer: $(jp oz ozone-secure -n "$ns" -o jsonpath='{.metadata.finalizers}')"
[ "$(jp sts ozone-secure-om -n "$ns" -o jsonpath='{.spec.template.spec.serviceAccountName}')" = ozone-secure-om ] \
  || die "the OM pod does not run as ozone-secure-om"
[ "$(jp sts ozone-secure-datanode -n "$ns" -o jsonpath='{.spec.template.spec.automountServiceAccountToken}')" = false ] \
  || die "datanodes get an API token"
[ "$(jp clusterrolebinding "$binding" -o jsonpath='{.roleRef.name} {.subjects[0].namespace}/{.subjects[0].name}')" \
  = "ozone-operator-tokenreview $ns/ozone-secure-om" ] || die "binding: $(jp clusterrolebinding "$binding" -o yaml)"
[ "$(kubectl auth can-i create tokenreviews.authentication.k8s.io --as "system:serviceaccount:$ns:ozone-secure-om")" = yes ] \
  || die "the OM cannot review tokens"
[ "$(kubectl auth can-i get secrets -n "$ns" --as "system:serviceaccount:$ns:ozone-secure-om")" = no ] \
  || die "the OM can read Secrets"
conf=$(jp cm ozone-secure-config -n "$ns" -o jsonpath='{.data.ozone\.conf}')
grep -qx "ozone.security.enabled = true" <<< "$conf" || die "config: $conf"
grep -qx "ozone.administrators = $opns/ozone-operator,$opns/admin" <<< "$conf" || die "config: $conf"
ca=$(jp secret ozone-secure-ca -n "$ns" -o jsonpath='{.data.ca\.crt}' | base64 -d)
for n in "$ns" tenant-a tenant-b; do
  [ "$(jp cm ozone-secure-ca-bundle -n "$n" -o jsonpath='{.data.ca\.crt}')" = "$ca" ] || die "no CA bundle in $n"
  [ "$(jp cm ozone-secure-ca-bundle -n "$n" -o jsonpath='{.data}' | grep -c PRIVATE)" = 0 ] || die "a key in $n's bundle"
done
patch_oz ozone-secure '{"spec":{"security":{"tls":{"clientNamespaces":["tenant-a"]}}}}'
wait_until 60 "tenant-b's bundle removed" bash -c "[ -z \"\$(kubectl get cm ozone-secure-ca-bundle -n tenant-b -o name 2>/dev/null)\" ]"
jp cm ozone-secure-ca-bundle -n tenant-a -o name | grep -q . || die "tenant-a's bundle went too"
ok

step "the OM, as its operator-made ServiceAccount, knows clients by their tokens (TokenReview)"
# The OM runs here (the fake kubelets run no containers), with the
# ServiceAccount, binding and config the operator made: only TLS is left
# out (its certificate names the cluster's DNS names, not 127.0.0.1).
server=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
api_ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
cat > "$sec/om.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$server", certificate-authority: "$api_ca"}}]
users: [{name: om, user: {token: "$(kubectl create token ozone-secure-om -n "$ns" --duration 1h)"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: om}}]
current-context: e2e
KC
jp secret ozone-secure-block-token -n "$ns" -o jsonpath='{.data.secret}' | base64 -d > "$sec/secret"
grep -v '^hdds.grpc.tls' <<< "$conf" | sed "s|/etc/ozone/token/secret|$sec/secret|" > "$sec/ozone.conf"
om_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
KUBECONFIG=$sec/om.kubeconfig target/debug/ozone om --metadata-dir "$sec/om" --conf "$sec/ozone.conf" \
  --grpc-addr "127.0.0.1:$om_port" --http-addr 127.0.0.1:0 --ready-file "$sec/om.ready" \
  >> "$work/om.log" 2>&1 &
om_pid=$!
om_up() { # ready, or exited: then its log says why
  kill -0 "$om_pid" 2>/dev/null || die "the secured OM exited: $(tail -3 "$work/om.log")"
  test -f "$sec/om.ready"
}
wait_until 60 "the secured OM" om_up
kubectl create token app -n tenant-a --audience ozone > "$sec/a"
kubectl create token app -n tenant-b --audience ozone > "$sec/b"
kubectl create token admin -n "$opns" --audience ozone > "$sec/admin"
kubectl create token app -n tenant-a > "$sec/api-audience"
kubectl create token gone -n tenant-a --audience ozone > "$sec/gone"
kubectl delete sa gone -n tenant-a >/dev/null
kubectl create token ozone-operator -n "$opns" --audience ozone > "$sec/operator"
oz() { # token-file args...: ozone as the holder of that token
  local t=$1; shift
  target/debug/ozone --om "127.0.0.1:$om_port" --set "ozone.client.token.file=$sec/$t" "$@"
}
refused() { # token-file expected-fragment args...
  local t=$1 want=$2 out; shift 2
  if out=$(oz "$t" "$@" 2>&1); then die "$t: ozone $* was allowed: $out"; fi
  grep -qF -- "$want" <<< "$out" || die "$t: ozone $* refused without \"$want\": $out"
}
oz admin sh volume create --user tenant-a/app /tenant-a > /dev/null || die "the admin could not create a volume"
oz operator sh volume create /operator-made > /dev/null || die "the operator's token is not an administrator's"
oz a sh bucket create /tenant-a/data > /dev/null || die "tenant-a could not create its bucket"
oz a sh key ls /tenant-a/data > /dev/null || die "tenant-a could not list its bucket"
[ "$(oz a sh bucket getacl /tenant-a/data | head -1)" = "owner: tenant-a/app" ] || die "bucket owner"
refused b "tenant-b/app may not list keys" sh key ls /tenant-a/data
refused a "tenant-a/app may not create volumes" sh volume create /mine
refused api-audience "token refused by the API server" sh key ls /tenant-a/data
refused gone "token refused by the API server" sh key ls /tenant-a/data
oz a sh bucket addacl -a user:tenant-b/app:l /tenant-a/data > /dev/null || die "addacl"
oz b sh key ls /tenant-a/data > /dev/null || die "tenant-b could not list once granted"
kill "$om_pid"; wait "$om_pid" 2>/dev/null || true; om_pid=""
ok "tokens from kubectl create token, checked by TokenReview"

step "deleting a secure cluster removes its binding and bundles elsewhere, then the finalizer"
kubectl delete oz ozone-secure -n "$ns" --wait --timeout 120s >/dev/null || die "ozone-secure was not deleted"
jp clusterrolebinding "$binding" -o name | grep -q . && die "the TokenReview binding outlived its cluster"
jp cm ozone-secure-ca-bundle -n tenant-a -o name | grep -q . && die "tenant-a's bundle outlived its cluster"
ok

step "the operator log holds no permission error and no panic"
if [ "$mode" = host ]; then
  grep -Ei "forbidden|panicked" "$work/operator.log" && die "see $work/operator.log"
fi
ok

echo "$passed passed, $failed failed"
