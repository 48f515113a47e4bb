#!/usr/bin/env bash
# The real-pod suite: the chart, the operator and the examples as pods on
# real kubelets (e2e/nodes: containerd, runc, CNI bridge, kube-proxy,
# CoreDNS), each step an assertion. Run inside e2e/nodes/up.sh (which sets
# KUBECONFIG); e2e/pods/run.sh builds the images and does both.
#
#   1. helm install: the operator runs in-cluster from the image, Ready
#      through its probe
#   2. examples/production.yaml (sized for this machine): TLS, block tokens,
#      authentication; the OM and datanodes Ready through their probes;
#      then deleted, and everything the operator made is gone
#   3. examples/minimal.yaml and a JVM pod made from
#      examples/workloads/hbase-regionserver.yaml (only the image changed):
#      a file written and read back through the jar, the read short-circuit
#      across pods; a pod on the node without a datanode reads over gRPC
#   4. HBase as pods: ZooKeeper, an HMaster and two region servers (the
#      example's pod spec), a verified load; a region server pod deleted
#      with --grace-period=0 --force, every acknowledged row still there
#   5. a datanode pod deleted: reads go on, the StatefulSet brings it back
#      with its data
#   6. a config change rolls the datanodes one at a time while a reader reads
#   7. kubectl delete of the cluster removes everything the operator made
#
# A failure prints pod events, container logs and kubelet logs. Ends with
# `N passed, N failed`.
set -euo pipefail
# The whole script is one compound command: bash reads it all before running
# it, so an edit of this file mid-run changes nothing.
{
cd "$(dirname "$0")/../.."
root=$PWD
source e2e/tools.sh
export PATH=$E2E_BIN:$PATH
: "${KUBECONFIG:?run inside e2e/nodes/up.sh}"
: "${OZONE_IMAGE:?the project image}" "${HBASE_IMAGE:?the JVM image (e2e/image/hbase.sh)}"
ns=storage
opns=ozone-system
cns=hbase
work=${E2E_WORK:-$root/target/e2e-pods}
rm -rf "$work"; mkdir -p "$work"
passed=0; failed=0; current=""
py=$E2E_BIN/python

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
# Pod events, container logs and the kubelets' log tails.
diagnostics() {
  set +e
  {
    kubectl get nodes -o wide
    kubectl get oz,sts,deploy,pods,pvc,pv -A -o wide
    kubectl get events -A --sort-by=.lastTimestamp | tail -60
  } > "$work/diagnostics.txt" 2>&1
  echo "--- cluster state and events: $work/diagnostics.txt"
  tail -40 "$work/diagnostics.txt"
  local p
  for p in $(kubectl get pods -A -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}' 2>/dev/null); do
    kubectl logs -n "${p%%/*}" "${p#*/}" --all-containers --tail 30 > "$work/logs-${p//\//_}.txt" 2>&1
    if ! kubectl get pod -n "${p%%/*}" "${p#*/}" -o jsonpath='{.status.containerStatuses[*].ready}' 2>/dev/null | grep -qv false; then
      echo "--- logs of $p (not ready)"; tail -30 "$work/logs-${p//\//_}.txt"
    fi
  done
  for n in "$CP_DIR"/node-*/kubelet.log; do
    [ -f "$n" ] && { echo "--- $n"; grep -E '^E' "$n" | grep -v -e 'filesystem info' -e 'HasDedicatedImageFs' | tail -15; }
  done
  set -e
}
# wait_until SECONDS DESCRIPTION CMD...: polls CMD every second.
wait_until() {
  local limit=$1 what=$2; shift 2
  local end=$((SECONDS + limit))
  until "$@" > /dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "timed out after ${limit}s waiting for $what"
    sleep 1
  done
}
jp() { kubectl get "$@" 2>/dev/null; }
cond_is() { # cluster type status/reason
  [ "$(jp oz "$1" -n "$ns" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}/{.status.conditions[?(@.type==\"$2\")].reason}")" = "$3" ]
}
available() { cond_is "$1" Available True/MinimumReplicasAvailable; }
dn_selector() { echo "app.kubernetes.io/instance=$1,app.kubernetes.io/component=datanode"; }
all_ready() { # namespace selector count: COUNT pods, every container ready
  local st
  st=$(kubectl get pods -n "$1" -l "$2" -o jsonpath='{range .items[*]}{.status.containerStatuses[*].ready}{"\n"}{end}')
  [ "$(grep -c . <<< "$st")" = "$3" ] && ! grep -q false <<< "$st"
}
# metric URL NAME-WITH-LABELS: its value (0 when absent), curl'ed from here:
# this shell is in the cluster's network namespace, pod addresses route.
metric() { curl -fsS "$1/metrics" | awk -v m="$2" '$1 == m { v = $2 } END { print (v == "" ? 0 : v) + 0 }'; }
pod_ip() { kubectl get pod -n "$1" "$2" -o jsonpath='{.status.podIP}'; }
pod_node() { kubectl get pod -n "$1" "$2" -o jsonpath='{.spec.nodeName}'; }
# The datanode pod of cluster $1 on node $2.
dn_on() {
  kubectl get pods -n "$ns" -l "$(dn_selector "$1")" -o jsonpath="{range .items[?(@.spec.nodeName==\"$2\")]}{.metadata.name}{end}"
}
owned_by() { # cluster uid: objects of the operator's kinds whose owner is uid
  kubectl get cm,svc,sts,pdb,secret,networkpolicy -n "$ns" -o json \
    | "$py" -c 'import json,sys; uid=sys.argv[1]; print("\n".join(i["kind"]+"/"+i["metadata"]["name"] for i in json.load(sys.stdin)["items"] if any(o.get("uid")==uid for o in i["metadata"].get("ownerReferences",[]))))' "$1"
}

# Static provisioning, as on bare metal: a default StorageClass without a
# provisioner, and local PersistentVolumes on every storage node (their
# directories are the node's own /mnt/disks, see e2e/nodes).
storage_nodes=$(kubectl get nodes -l node-role.example.com/storage=true -o jsonpath='{.items[*].metadata.name}')
plain_node=$(kubectl get nodes -l '!node-role.example.com/storage' -o jsonpath='{.items[0].metadata.name}')
kubectl apply -f - > /dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast-ssd}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
YAML
for n in $storage_nodes; do
  for k in 1 2 3; do
    for class in local fast-ssd; do
      mkdir -p "$CP_DIR/$n/host/mnt/disks/$class-$k"
      kubectl apply -f - > /dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: $n-$class-$k}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $class
  local: {path: /mnt/disks/$class-$k}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$n]}]
YAML
    done
  done
done

# --- 1. the chart: the operator in-cluster ---------------------------------------
step "helm install: the operator runs in-cluster from the image, Ready through its probe"
repo=${OZONE_IMAGE%:*}; tag=${OZONE_IMAGE##*:}
helm install ozone-operator charts/ozone-operator -n "$opns" --create-namespace \
  --set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=Never \
  --wait --timeout 240s > "$work/helm-install.txt" 2>&1 || die "$(cat "$work/helm-install.txt")"
wait_until 120 "the operator pod Ready" all_ready "$opns" app.kubernetes.io/name=ozone-operator 1
op_pod=$(kubectl get pods -n "$opns" -l app.kubernetes.io/name=ozone-operator -o jsonpath='{.items[0].metadata.name}')
# Its log, read through the API server from the kubelet, shows it reached the
# API server at the kubernetes Service (kube-proxy) with its own token.
wait_until 60 "the operator to apply its CRD and list its resources" bash -c \
  "kubectl logs -n $opns $op_pod | grep -q 'CRD applied' && kubectl logs -n $opns $op_pod | grep -q 'resources listed: ready'"
op_ip=$(pod_ip "$opns" "$op_pod")
curl -fsS "http://$op_ip:8080/readyz" > /dev/null || die "the operator's /readyz at $op_ip:8080"
ok "pod $op_pod on $(pod_node "$opns" "$op_pod")"

# --- 2. the production example ----------------------------------------------------
step "examples/production.yaml: TLS, tokens and authentication; OM and datanodes Ready through their probes"
kubectl create namespace "$ns" > /dev/null
kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=privileged > /dev/null
kubectl create namespace "$cns" > /dev/null
kubectl create serviceaccount ozone-admin -n "$opns" > /dev/null
# Sized for this machine: three datanodes (one per storage node) and small
# requests. Everything else is the example's.
"$py" - examples/production.yaml "$OZONE_IMAGE" > "$work/production.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
repo, tag = sys.argv[2].rsplit(":", 1)
s = doc["spec"]
s["image"].update(repository=repo, tag=tag, pullPolicy="Never")
s["datanodes"]["replicas"] = 3
small = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
s["om"]["resources"] = small
s["datanodes"]["resources"] = small
print(yaml.safe_dump(doc))
PY
kubectl apply -f "$work/production.yaml" > /dev/null
wait_until 300 "ozone-prod Available" available ozone-prod
wait_until 120 "every ozone-prod datanode Ready" all_ready "$ns" "$(dn_selector ozone-prod)" 3
pnodes=$(kubectl get pods -n "$ns" -l "$(dn_selector ozone-prod)" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | grep -c .)
[ "$pnodes" = 3 ] || die "ozone-prod datanodes on $pnodes nodes"
om_ip=$(pod_ip "$ns" ozone-prod-om-0)
# TLS on the OM's gRPC port: the certificate the operator's CA signed.
kubectl get secret ozone-prod-ca -n "$ns" -o jsonpath='{.data.ca\.crt}' | base64 -d > "$work/prod-ca.crt"
echo | openssl s_client -connect "$om_ip:9862" -CAfile "$work/prod-ca.crt" \
  -servername ozone-prod-om.storage.svc > "$work/om-tls.txt" 2>&1 || true
grep -q "Verify return code: 0" "$work/om-tls.txt" || die "the OM's TLS certificate: $(grep -i verify "$work/om-tls.txt")"
ok "3 datanodes on 3 nodes, OM TLS verified against the cluster CA"

step "kubectl delete of ozone-prod removes everything the operator made"
prod_uid=$(jp oz ozone-prod -n "$ns" -o jsonpath='{.metadata.uid}')
[ -n "$(owned_by "$prod_uid")" ] || die "nothing is owned by ozone-prod"
kubectl delete oz ozone-prod -n "$ns" --wait=true --timeout 180s > /dev/null || die "delete did not finish"
wait_until 180 "ozone-prod's children to go" bash -c "[ -z \"\$(kubectl get pods -n $ns -l app.kubernetes.io/instance=ozone-prod -o name)\" ]"
left=$(owned_by "$prod_uid")
[ -z "$left" ] || die "left behind: $left"
ok

# --- 3. the minimal example and a JVM pod from the HBase example --------------
step "examples/minimal.yaml: Available, datanodes on local volumes, one per storage node"
kubectl apply -f examples/minimal.yaml > /dev/null
wait_until 300 "ozone Available" available ozone
wait_until 120 "every datanode Ready" all_ready "$ns" "$(dn_selector ozone)" 3
om() { kubectl exec -n "$ns" ozone-om-0 -c om -- ozone --om ozone-om-0.ozone-om-headless.storage.svc.cluster.local:9862 "$@"; }
om sh volume create /vol1 > /dev/null || die "volume create"
om sh bucket create --layout FILE_SYSTEM_OPTIMIZED /vol1/hbase > /dev/null || die "bucket create"
ok "$(kubectl get pods -n "$ns" -l "$(dn_selector ozone)" -o jsonpath='{range .items[*]}{.spec.nodeName} {end}')"

step "a JVM pod from the HBase example writes through the jar and reads short-circuit across pods"
# The example, with only the region server's image replaced; it is
# scheduled while the node without a datanode is cordoned.
"$py" - examples/workloads/hbase-regionserver.yaml "$HBASE_IMAGE" > "$work/hbase-example.yaml" <<'PY'
import sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
for d in docs:
    if d["kind"] == "Pod":
        for c in d["spec"]["containers"]:
            if c["name"] == "regionserver":
                c["image"] = sys.argv[2]
print(yaml.safe_dump_all(docs))
PY
kubectl cordon "$plain_node" > /dev/null
kubectl apply -f "$work/hbase-example.yaml" > /dev/null
wait_until 180 "regionserver-0 Ready" all_ready "$cns" app=hbase-regionserver 1
kubectl uncordon "$plain_node" > /dev/null
rs_node=$(pod_node "$cns" regionserver-0)
rs_ip=$(pod_ip "$cns" regionserver-0)
dn=$(dn_on ozone "$rs_node")
[ -n "$dn" ] || die "no datanode on $rs_node"
dn_ip=$(pod_ip "$ns" "$dn")
rsx() { kubectl exec -n "$cns" regionserver-0 -c regionserver -- "$@"; }
rsx sh -c 'head -c 16777216 /dev/urandom > /tmp/check && sha256sum /tmp/check' > "$work/check.sum" || die "making the file"
want=$(cut -d' ' -f1 "$work/check.sum")
rsx hbase fs -put -f /tmp/check ozrs://ozone/vol1/hbase/check > "$work/put.txt" 2>&1 || die "put: $(tail -5 "$work/put.txt")"
# Bytes the datanodes served over gRPC, all of them.
grpc_bytes() {
  local p sum=0
  for p in $(kubectl get pods -n "$ns" -l "$(dn_selector ozone)" -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}'); do
    sum=$((sum + $(metric "http://$p:9882" ozone_datanode_read_bytes_total)))
  done
  echo $sum
}
opens0=$(metric "http://$dn_ip:9882" ozone_datanode_sc_opens_total)
grpc0=$(grpc_bytes)
relayed0=$(metric "http://$rs_ip:9890" 'ozone_sidecar_passthrough_connections_total{result="relayed"}')
sc0=$(metric "http://$rs_ip:9890" 'ozone_sidecar_read_bytes_total{path="short-circuit"}')
got=$(rsx sh -c 'hbase fs -cat ozrs://ozone/vol1/hbase/check 2>/tmp/cat.err | sha256sum') || die "cat failed"
[ "${got%% *}" = "$want" ] || die "read back $got, wrote $want"
opens=$(( $(metric "http://$dn_ip:9882" ozone_datanode_sc_opens_total) - opens0 ))
relayed=$(( $(metric "http://$rs_ip:9890" 'ozone_sidecar_passthrough_connections_total{result="relayed"}') - relayed0 ))
sc=$(( $(metric "http://$rs_ip:9890" 'ozone_sidecar_read_bytes_total{path="short-circuit"}') - sc0 ))
[ "$opens" -gt 0 ] || die "the datanode $dn on $rs_node handed over no descriptor (relayed $relayed, sidecar short-circuit bytes $sc)"
[ "$relayed" -gt 0 ] || [ "$sc" -gt 0 ] || die "neither a pass-through relay nor a sidecar short-circuit read"
grpc=$(( $(grpc_bytes) - grpc0 ))
[ "$grpc" = 0 ] || die "$grpc bytes came over gRPC"
ok "16 MiB bit-exact on $rs_node: $opens descriptors from $dn, $relayed relayed, $sc sidecar short-circuit bytes, 0 gRPC bytes"

# example_pod NAME NODE: the example's pod (its image replaced), named NAME,
# labelled app=NAME, on NODE.
example_pod() {
  "$py" - "$work/hbase-example.yaml" "$1" "$2" <<'PY'
import sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
pod = next(d for d in docs if d and d["kind"] == "Pod")
pod["metadata"]["name"] = sys.argv[2]
pod["metadata"]["labels"] = {"app": sys.argv[2]}
pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": sys.argv[3]}
print(yaml.safe_dump(pod))
PY
}

step "a pod on the node without a datanode reads over gRPC"
example_pod reader-plain "$plain_node" | kubectl apply -f - > /dev/null
wait_until 180 "reader-plain Ready" all_ready "$cns" app=reader-plain 1
pl_ip=$(pod_ip "$cns" reader-plain)
got=$(kubectl exec -n "$cns" reader-plain -c regionserver -- sh -c 'hbase fs -cat ozrs://ozone/vol1/hbase/check 2>/dev/null | sha256sum') || die "cat failed"
[ "${got%% *}" = "$want" ] || die "read back $got"
sc=$(metric "http://$pl_ip:9890" 'ozone_sidecar_read_bytes_total{path="short-circuit"}')
relayed=$(metric "http://$pl_ip:9890" 'ozone_sidecar_passthrough_connections_total{result="relayed"}')
[ "$sc" = 0 ] && [ "$relayed" = 0 ] || die "short-circuit on a node without a datanode: $sc bytes, $relayed relayed"
kubectl delete pod -n "$cns" reader-plain --wait=false > /dev/null
ok "bit-exact on $plain_node, nothing short-circuit"

# --- 4. HBase as pods -------------------------------------------------------------
step "HBase as pods: ZooKeeper, an HMaster and two region servers; 50,000 rows loaded and verified"
# The master and the region servers are the example's pod, named, with the
# hostname and subdomain under which HBase's processes find each other
# (the headless Service hbase); the master's container runs `hbase master`.
kubectl delete pod -n "$cns" regionserver-0 --wait=true > /dev/null
"$py" - "$work/hbase-example.yaml" "$HBASE_IMAGE" > "$work/hbase-cluster.yaml" <<'PY'
import copy, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
pod = next(d for d in docs if d and d["kind"] == "Pod")
image = sys.argv[2]
out = [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hbase-zookeeper", "namespace": "hbase"},
     "spec": {"selector": {"app": "hbase-zookeeper"}, "ports": [{"name": "zk", "port": 2181}]}},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hbase", "namespace": "hbase"},
     "spec": {"clusterIP": "None", "selector": {"hbase.e2e/member": "true"}, "ports": [{"name": "rpc", "port": 16020}]}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hbase-zookeeper", "namespace": "hbase",
                                                      "labels": {"app": "hbase-zookeeper"}},
     "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
              "containers": [{"name": "zookeeper", "image": image, "args": ["zookeeper"],
                              "readinessProbe": {"tcpSocket": {"port": 2181}}}]}},
]
for name, role in (("hbase-master", "master"), ("regionserver-0", None), ("regionserver-1", None)):
    p = copy.deepcopy(pod)
    p["metadata"]["name"] = name
    p["metadata"]["labels"] = {"app": "hbase-master" if role else "hbase-regionserver", "hbase.e2e/member": "true"}
    p["spec"]["hostname"] = name
    p["spec"]["subdomain"] = "hbase"
    if role:
        next(c for c in p["spec"]["containers"] if c["name"] == "regionserver")["args"] = [role]
    out.append(p)
print(yaml.safe_dump_all(out))
PY
kubectl apply -f "$work/hbase-cluster.yaml" > /dev/null
wait_until 120 "ZooKeeper Ready" all_ready "$cns" app=hbase-zookeeper 1
wait_until 180 "the HMaster pod Ready" all_ready "$cns" app=hbase-master 1
wait_until 180 "both region server pods Ready" all_ready "$cns" app=hbase-regionserver 2
wait_until 300 "the HMaster to initialise" bash -c \
  "kubectl logs -n $cns hbase-master -c regionserver | grep -q 'Master has completed initialization'"
hb() { kubectl exec -n "$cns" hbase-master -c regionserver -- hbase "$@"; }
rs_nodes=$(kubectl get pods -n "$cns" -l app=hbase-regionserver -o jsonpath='{range .items[*]}{.spec.nodeName} {end}')
# Descriptors the datanodes on the region servers' nodes have handed over.
rs_opens() {
  local n d sum=0
  for n in $rs_nodes; do
    d=$(dn_on ozone "$n")
    [ -n "$d" ] || continue # node-4 has no datanode
    sum=$((sum + $(metric "http://$(pod_ip "$ns" "$d"):9882" ozone_datanode_sc_opens_total)))
  done
  echo $sum
}
hb workload load usertable 50000 8 > "$work/load.txt" 2>&1 || die "load: $(tail -5 "$work/load.txt")"
opens0=$(rs_opens)
hb workload verify usertable 50000 5000 > "$work/verify.txt" 2>&1 || die "verify: $(tail -5 "$work/verify.txt")"
opens=$(( $(rs_opens) - opens0 ))
[ "$opens" -gt 0 ] || die "the region servers read their HFiles without a short-circuit open"
ok "$(grep -h -E '^(load|verify)' "$work/load.txt" "$work/verify.txt" | tr '\n' ' ')on $rs_nodes; $opens short-circuit opens"

step "a region server pod deleted with --grace-period=0 --force: every acknowledged row is there"
hb workload create writes 4 > "$work/create.txt" 2>&1 || die "create: $(tail -5 "$work/create.txt")"
kubectl exec -n "$cns" hbase-master -c regionserver -- hbase workload writer writes 1000000 90 /tmp/acked \
  > "$work/writer.txt" 2>&1 &
writer=$!
acked() { kubectl exec -n "$cns" hbase-master -c regionserver -- sh -c 'wc -l < /tmp/acked' 2>/dev/null || echo 0; }
acked_at_least() { [ "$(acked)" -ge "$1" ]; }
wait_until 180 "1000 acknowledged puts" acked_at_least 1000
before=$(acked)
kubectl delete pod -n "$cns" regionserver-1 --grace-period=0 --force > /dev/null 2>&1
wait "$writer" || die "the writer failed: $(tail -5 "$work/writer.txt")"
after=$(acked)
[ "$after" -gt "$((before + 100))" ] || die "writes did not resume after the deletion ($before -> $after)"
hb workload check-acked writes /tmp/acked > "$work/check-acked.txt" 2>&1 || die "check-acked: $(tail -5 "$work/check-acked.txt")"
# The kubelet gives a force-deleted pod's containers SIGTERM and 2 s before
# SIGKILL: the region server may close its WAL itself or leave it to be split.
if kubectl logs -n "$cns" hbase-master -c regionserver | grep -q -- "-splitting"; then split="its WAL split by the master"; else split="no WAL left to split"; fi
ok "$(grep -h '^writer:' "$work/writer.txt"); $(tail -1 "$work/check-acked.txt"); $split"
# HBase is done with: its pods go before the datanodes are disturbed.
kubectl delete pod -n "$cns" --all --wait=true --timeout 120s > /dev/null

# --- 5. a datanode pod deleted ------------------------------------------------------
# A reader pod (the example's pod again) on a node with a datanode reads the
# 16 MiB file of step 3 over and over through one FileSystem
# (`hbase workload read-loop`, every read's SHA-256 checked) until
# /tmp/stop exists in it.
example_pod reader "$rs_node" | kubectl apply -f - > /dev/null
rdx() { kubectl exec -n "$cns" reader -c regionserver -- "$@"; }
start_reader() { # SECONDS OUT: a read-loop in the background; its pid in $reader
  rdx rm -f /tmp/stop
  rdx hbase workload read-loop ozrs://ozone/vol1/hbase/check "$1" "$want" /tmp/stop > "$2" 2>&1 &
  reader=$!
}
stop_reader() { # OUT
  rdx touch /tmp/stop
  wait "$reader" || die "the reader failed: $(grep -v -e WARN -e '^\s*at ' "$1" | tail -5)"
  grep -q '^read-loop: [1-9]' "$1" || die "the reader read nothing: $(tail -3 "$1")"
}
dn_uid() { kubectl get pod -n "$ns" "$1" -o jsonpath='{.metadata.uid}' 2> /dev/null; }
step "a datanode pod deleted: reads go on from the other replicas; the StatefulSet brings it back with its data"
wait_until 180 "the reader pod Ready" all_ready "$cns" app=reader 1
dn=$(dn_on ozone "$rs_node")
old_uid=$(dn_uid "$dn")
claim_pv=$(kubectl get pvc -n "$ns" "data-$dn" -o jsonpath='{.spec.volumeName}')
start_reader 600 "$work/read-loop-delete.txt"
sleep 8
kubectl delete pod -n "$ns" "$dn" --wait=true --timeout 120s > /dev/null || die "the deletion of $dn did not finish"
new_ready() { [ "$(dn_uid "$dn")" != "$old_uid" ] && all_ready "$ns" "$(dn_selector ozone)" 3; }
wait_until 180 "$dn back and Ready" new_ready
sleep 5
stop_reader "$work/read-loop-delete.txt"
[ "$(pod_node "$ns" "$dn")" = "$rs_node" ] || die "$dn came back on $(pod_node "$ns" "$dn"), not $rs_node"
[ "$(kubectl get pvc -n "$ns" "data-$dn" -o jsonpath='{.spec.volumeName}')" = "$claim_pv" ] || die "data-$dn is bound to another volume"
# Its replica is still on its volume: a read on its node is handed the
# block's descriptor by the new pod.
dn_ip=$(pod_ip "$ns" "$dn")
opens0=$(metric "http://$dn_ip:9882" ozone_datanode_sc_opens_total)
got=$(rdx sh -c 'hbase fs -cat ozrs://ozone/vol1/hbase/check 2> /dev/null | sha256sum') || die "cat failed"
[ "${got%% *}" = "$want" ] || die "read back $got after $dn came back"
opens=$(( $(metric "http://$dn_ip:9882" ozone_datanode_sc_opens_total) - opens0 ))
[ "$opens" -gt 0 ] || die "the new $dn handed over no descriptor: its replica is gone"
ok "$(grep -h '^read-loop' "$work/read-loop-delete.txt"); $dn back on $rs_node with volume $claim_pv, $opens short-circuit opens"

# --- 6. a config change rolls the datanodes ----------------------------------------
uids() { kubectl get pods -n "$ns" -l "$(dn_selector ozone)" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}' | sort; }
rolled() { # every datanode pod replaced, the StatefulSet on its new revision, all Ready
  local st
  st=$(jp sts ozone-datanode -n "$ns" -o jsonpath='{.status.currentRevision}/{.status.updateRevision}/{.status.updatedReplicas}/{.status.readyReplicas}')
  IFS=/ read -r cur upd n r <<< "$st"
  [ "$cur" = "$upd" ] && [ "$n" = 3 ] && [ "$r" = 3 ] && [ -z "$(comm -12 <(echo "$before") <(uids))" ]
}
step "a config change rolls the datanodes through real restarts, one at a time, while a reader reads"
before=$(uids)
start_reader 600 "$work/read-loop-roll.txt"
sleep 5
kubectl patch oz ozone -n "$ns" --type merge -p '{"spec":{"checksum":{"bytesPerChecksum":65536}}}' > /dev/null
most_down=0
end=$((SECONDS + 300))
until rolled; do
  [ $SECONDS -lt $end ] || die "the roll did not finish in 300 s"
  down=$((3 - $(kubectl get pods -n "$ns" -l "$(dn_selector ozone)" -o jsonpath='{range .items[*]}{.status.containerStatuses[*].ready}{"\n"}{end}' | grep -c -v false)))
  [ $down -gt $most_down ] && most_down=$down
  sleep 0.5
done
stop_reader "$work/read-loop-roll.txt"
[ "$most_down" -le 1 ] || die "$most_down datanodes were down at once"
wait_until 60 "ozone Available" available ozone
ok "at most $most_down down; $(grep -h '^read-loop' "$work/read-loop-roll.txt")"

# --- 7. the cluster deleted --------------------------------------------------------
step "kubectl delete of the cluster removes everything the operator made; the data claims stay"
kubectl delete pod -n "$cns" reader --wait=false > /dev/null
uid=$(jp oz ozone -n "$ns" -o jsonpath='{.metadata.uid}')
[ -n "$(owned_by "$uid")" ] || die "nothing is owned by ozone"
kubectl delete oz ozone -n "$ns" --wait=true --timeout 180s > /dev/null || die "delete did not finish"
wait_until 180 "ozone's pods to go" bash -c "[ -z \"\$(kubectl get pods -n $ns -l app.kubernetes.io/instance=ozone -o name)\" ]"
left=$(owned_by "$uid")
[ -z "$left" ] || die "left behind: $left"
claims=$(kubectl get pvc -n "$ns" -o name | grep -c datanode || true)
[ "$claims" -ge 3 ] || die "only $claims datanode claims stayed (volumeDeletionPolicy Retain)"
ok "$claims claims kept"

echo "$passed passed, $failed failed"
exit 0
}
