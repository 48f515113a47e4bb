#!/usr/bin/env bash
# The same suite on kind (real kubelets and containers), for CI machines with
# a Docker engine (the GitHub workflow .github/workflows/e2e.yaml; it cannot
# run on machines without one): builds the image from the Containerfile,
# loads it into a 4-node kind cluster (`kind load docker-image`),
# runs e2e/suite.sh with the operator as the chart's Deployment. Without
# Docker, e2e/control-plane/up.sh runs the same suite against fake nodes, and
# e2e/containers.sh runs the image itself with podman.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
image=ghcr.io/ozone-rs/ozone:$version
cluster=${KIND_CLUSTER:-ozone-e2e}
mkdir -p target
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
# The image as published: compiled in the Containerfile's builder stage.
docker build --target release --build-arg "VERSION=$version" -t "$image" -f Containerfile .
kind create cluster --name "$cluster" --config target/kind.yaml --wait 120s
trap 'kind delete cluster --name "$cluster"' EXIT
kind load docker-image "$image" --name "$cluster"
E2E_OPERATOR=in-cluster bash e2e/suite.sh
