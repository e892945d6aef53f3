#!/usr/bin/env bash
# Builds the binaries envtest needs — kube-apiserver and etcd — from Go
# modules (there are no prebuilt binaries to download here), once, into a
# cache outside the repository keyed by version:
#
#   ${SANDBOXD_CACHE:-~/.cache/sandboxd}/envtest/k8s-<version>/{kube-apiserver,etcd}
#
# and prints that directory (for KUBEBUILDER_ASSETS). A second run finds the
# binaries and returns at once. The first build takes many minutes on two
# cores.
#
# kube-apiserver comes from k8s.io/kubernetes, through the wrapper module of
# scripts/lib/k8s-module.sh (as kube-node-assets.sh builds the kubelet). etcd
# is built from go.etcd.io/etcd/server/v3 at the version kubernetes itself
# requires, in the same wrapper module.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
cache=${SANDBOXD_CACHE:-$HOME/.cache/sandboxd}/envtest/k8s-$K8S_VERSION
if [[ -x $cache/kube-apiserver && -x $cache/etcd ]]; then
	echo "$cache"
	exit 0
fi
. "$(dirname "$0")/lib/k8s-module.sh"
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' <<<"$(k8s_gomod)")
[[ -n $etcd_version ]] || { echo "envtest-assets: no etcd version in k8s.io/kubernetes v$K8S_VERSION's go.mod" >&2; exit 1; }

echo "envtest-assets: building kube-apiserver v$K8S_VERSION and etcd $etcd_version into $cache" >&2
# One wrapper module for both: etcd then builds with kubernetes's versions of
# the modules they share (grpc, protobuf, otel, ...), so those packages
# compile once, for kube-apiserver, and etcd's build is mostly its own code
# (about 20 s, against a minute as a module of its own on a new machine).
k8s_wrapper_module k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3
got=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
[[ $got == "$etcd_version" ]] || { echo "envtest-assets: the wrapper module selected etcd $got, not kubernetes's $etcd_version" >&2; exit 1; }
k8s_build k8s.io/kubernetes/cmd/kube-apiserver "$cache/kube-apiserver"
CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$cache/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$cache/etcd.tmp" "$cache/etcd"
echo "$cache"
