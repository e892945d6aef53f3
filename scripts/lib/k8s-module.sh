# Sourced by the scripts that build Kubernetes binaries from Go modules
# (envtest-assets.sh, kube-node-assets.sh). There are no prebuilt binaries to
# download here, and k8s.io/kubernetes cannot be required as it is: its
# go.mod points its k8s.io/* staging modules at ./staging (replace
# directives), which a module depending on it cannot use. k8s_wrapper_module
# writes, in the current directory, a small module requiring
# k8s.io/kubernetes at $K8S_VERSION that pins every staging module to the
# matching v0.x.y release, with a tools.go importing the given commands, and
# resolves it. k8s_build builds one of them into a file, stamping the
# version as Kubernetes' own build does (it is what /version, a Node's
# kubeletVersion and skew checks read).

# k8s_gomod prints k8s.io/kubernetes v$K8S_VERSION's go.mod as the module
# proxy serves it (fetched with the module, which the build needs anyway).
k8s_gomod() {
	local modpath
	modpath=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	cat "$modpath"
}

# k8s_wrapper_module CMD... (e.g. k8s.io/kubernetes/cmd/kubelet)
k8s_wrapper_module() {
	local modfile staging_version=0.${K8S_VERSION#1.}
	modfile=$(k8s_gomod)
	{
		echo "module k8sassets"
		echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
		echo "require k8s.io/kubernetes v$K8S_VERSION"
		# Every "k8s.io/x => ./staging/src/k8s.io/x" of kubernetes' go.mod.
		sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' <<<"$modfile" |
			while read -r m; do echo "replace $m => $m v$staging_version"; done
	} >go.mod
	{
		echo '//go:build tools'
		echo
		echo 'package tools'
		echo
		for cmd in "$@"; do echo "import _ \"$cmd\""; done
	} >tools.go
	go mod tidy -e >/dev/null 2>&1 || true
	go get "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
	go mod tidy >/dev/null
}

# k8s_build CMD OUT: a static, stripped build of CMD, written to OUT
# atomically.
k8s_build() {
	local minor=${K8S_VERSION#1.}
	minor=${minor%%.*}
	CGO_ENABLED=0 go build -trimpath -o "$2.tmp" \
		-ldflags "-s -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
		"$1"
	mv "$2.tmp" "$2"
}
