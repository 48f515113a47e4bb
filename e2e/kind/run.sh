#!/usr/bin/env bash
# The same suite on kind (real kubelets and containers), for CI machines with
# a Docker engine: builds the image, loads it into a 4-node kind cluster,
# runs e2e/suite.sh with the operator as the chart's Deployment. It cannot
# run on machines without Docker; there e2e/control-plane/up.sh runs the
# suite against fake nodes instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(awk -F'"' '/^appVersion:/ {print $2}' charts/ozone-operator/Chart.yaml)
image=ghcr.io/ozone-rs/ozone:$version
cluster=${KIND_CLUSTER:-ozone-e2e}
cat > target/kind.yaml <<'K'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
    labels: {node-role.example.com/storage: "true"}
  - role: worker
    labels: {node-role.example.com/storage: "true"}
  - role: worker
    labels: {node-role.example.com/storage: "true"}
  - role: worker
    labels: {node-role.example.com/storage: "true"}
K
docker build -t "$image" -f Containerfile .
kind create cluster --name "$cluster" --config target/kind.yaml --wait 120s
trap 'kind delete cluster --name "$cluster"' EXIT
kind load docker-image "$image" --name "$cluster"
E2E_OPERATOR=in-cluster bash e2e/suite.sh
