#!/usr/bin/env bash
# Builds the node and control-plane components the real-node Kubernetes
# tests run beside envtest's API server — kubelet, kube-scheduler and
# kube-controller-manager — from Go modules, at the API server's version,
# once, into a cache outside the repository keyed by version:
#
#   ${SANDBOXD_CACHE:-~/.cache/sandboxd}/kube-node/k8s-<version>/
#       {kubelet,kube-scheduler,kube-controller-manager}
#
# and prints that directory. Beside them goes kube-router-<its version>,
# kube-router's NetworkPolicy controller (only its firewall runs), which
# the test nodes run to enforce NetworkPolicies as a cluster's CNI would:
# Debian's bridge plugin enforces none (internal/kubetest/node/netpol.go). A second run finds the binaries and returns at
# once; the first build takes many minutes on two cores (the Go build cache
# shares most packages with kube-apiserver's). The wrapper-module technique
# is scripts/lib/k8s-module.sh's, as for envtest-assets.sh.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
cache=${SANDBOXD_CACHE:-$HOME/.cache/sandboxd}/kube-node/k8s-$K8S_VERSION
# Keep in step with internal/kubetest/node/netpol.go's kubeRouterBinary.
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-v2.1.0}
bins=(kubelet kube-scheduler kube-controller-manager)
missing=()
for b in "${bins[@]}"; do [[ -x $cache/$b ]] || missing+=("$b"); done
router=$cache/kube-router-$KUBE_ROUTER_VERSION
if [[ ! -x $router ]]; then
	# Its own module, built as released (go install honours its go.mod).
	echo "kube-node-assets: building kube-router $KUBE_ROUTER_VERSION into $cache" >&2
	mkdir -p "$cache"
	gobin=$(mktemp -d)
	GOFLAGS= GOBIN=$gobin CGO_ENABLED=0 go install -trimpath -ldflags=-s \
		"github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
	mv "$gobin/kube-router" "$router"
	rm -rf "$gobin"
fi
if ((${#missing[@]} == 0)); then
	echo "$cache"
	exit 0
fi
. "$(dirname "$0")/lib/k8s-module.sh"
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
k8s_wrapper_module "${missing[@]/#/k8s.io/kubernetes/cmd/}"
for b in "${missing[@]}"; do
	echo "kube-node-assets: building $b v$K8S_VERSION into $cache" >&2
	k8s_build "k8s.io/kubernetes/cmd/$b" "$cache/$b"
done
echo "$cache"
