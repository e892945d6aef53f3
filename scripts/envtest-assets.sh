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
# kube-apiserver comes from k8s.io/kubernetes, whose go.mod points its
# k8s.io/* staging modules at ./staging (replace directives), which a module
# depending on it cannot use: a small wrapper module pins every staging module
# to the matching v0.x.y release instead. etcd is built from
# go.etcd.io/etcd/server/v3 at the version kubernetes itself requires.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
cache=${SANDBOXD_CACHE:-$HOME/.cache/sandboxd}/envtest/k8s-$K8S_VERSION
if [[ -x $cache/kube-apiserver && -x $cache/etcd ]]; then
	echo "$cache"
	exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

staging_version=0.${K8S_VERSION#1.}
# kubernetes' own go.mod, as the module proxy serves it (fetched with the
# module, which the build needs anyway).
modpath=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
modfile=$(cat "$modpath")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' <<<"$modfile")
[[ -n $etcd_version ]] || { echo "envtest-assets: no etcd version in k8s.io/kubernetes v$K8S_VERSION's go.mod" >&2; exit 1; }

{
	echo "module envtestassets"
	echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
	echo "require k8s.io/kubernetes v$K8S_VERSION"
	# Every "k8s.io/x => ./staging/src/k8s.io/x" of kubernetes' go.mod.
	sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' <<<"$modfile" |
		while read -r m; do echo "replace $m => $m v$staging_version"; done
} >go.mod
cat >tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
echo "envtest-assets: building kube-apiserver v$K8S_VERSION (staging v$staging_version) and etcd $etcd_version into $cache" >&2
go mod tidy -e >/dev/null 2>&1 || true
go get "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
go mod tidy >/dev/null
# The version the API server reports (/version, discovery) is stamped at
# link time, as Kubernetes' own build does.
minor=${K8S_VERSION#1.}; minor=${minor%%.*}
CGO_ENABLED=0 go build -trimpath -o "$cache/kube-apiserver.tmp" \
	-ldflags "-s -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
	k8s.io/kubernetes/cmd/kube-apiserver
mv "$cache/kube-apiserver.tmp" "$cache/kube-apiserver"

mkdir etcd && cd etcd
cat >go.mod <<GOMOD
module envtestetcd
go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')
require go.etcd.io/etcd/server/v3 $etcd_version
GOMOD
cat >tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
go mod tidy >/dev/null
CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$cache/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$cache/etcd.tmp" "$cache/etcd"
echo "$cache"
