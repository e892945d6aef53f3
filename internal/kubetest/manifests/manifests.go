// Package manifests renders and applies Kubernetes manifests for tests:
// deploy/kubernetes's, which the manifest tests check on a bare API server
// and the end-to-end tests deploy on the real test nodes. It renders as
// `kubectl apply -k` does (kustomize's own library) and applies as
// `kubectl apply --server-side` does, keeping the API server's warnings.
//
// This package is test-only; production code must not import it.
package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Render builds the kustomization in dir as `kubectl apply -k` would.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		// Through JSON, so that numbers are what the API machinery expects.
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// ReadFile parses a one-object manifest file that no kustomization
// renders (such as deploy/kubernetes's optional RuntimeClass).
func ReadFile(name string) (*unstructured.Unstructured, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return u, nil
}

// Applier server-side-applies unstructured objects, keeping the warnings
// the API server returns for each. Its requests are sequential.
type Applier struct {
	fieldManager string
	dyn          dynamic.Interface
	mapper       *restmapper.DeferredDiscoveryRESTMapper
	warn         *warnings
}

// NewApplier applies as fieldManager with cfg's credentials.
func NewApplier(cfg *rest.Config, fieldManager string) (*Applier, error) {
	w := &warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{fieldManager: fieldManager, dyn: dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), warn: w}, nil
}

// Apply server-side-applies u (as a dry run that stores nothing when
// dryRun) and returns the object as the server has it or would have it,
// and the warnings of that request.
func (a *Applier) Apply(ctx context.Context, u *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, []string, error) {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, nil, fmt.Errorf("no API resource for %s: %w", gvk, err)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, nil, err
	}
	opts := metav1.PatchOptions{FieldManager: a.fieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == "namespace" {
		ri = a.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	a.warn.take()
	got, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts)
	return got, a.warn.take(), err
}

// warnings collects the API server's Warning headers.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}
