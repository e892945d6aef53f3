package core_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// optionalMethods are the methods of core.Manager that are not
// core.Backend's, each with the capability it belongs to.
func optionalMethods(t *testing.T) map[string]core.Capability {
	t.Helper()
	ports := map[core.Capability]reflect.Type{
		core.CapNetwork:    reflect.TypeFor[core.Network](),
		core.CapSnapshots:  reflect.TypeFor[core.Snapshots](),
		core.CapVolumes:    reflect.TypeFor[core.Volumes](),
		core.CapTemplates:  reflect.TypeFor[core.Templates](),
		core.CapMonitoring: reflect.TypeFor[core.Monitoring](),
	}
	if len(ports) != len(core.Capabilities()) {
		t.Fatalf("the test knows %d optional capabilities; core.Capabilities lists %d", len(ports), len(core.Capabilities()))
	}
	out := map[string]core.Capability{}
	for c, typ := range ports {
		for i := range typ.NumMethod() {
			out[typ.Method(i).Name] = c
		}
	}
	backend, manager := reflect.TypeFor[core.Backend](), reflect.TypeFor[core.Manager]()
	if got := backend.NumMethod() + len(out); got != manager.NumMethod() {
		t.Fatalf("core.Backend's %d methods and the optional capabilities' %d are not core.Manager's %d: a port is missing from core.Manager or from this test",
			backend.NumMethod(), len(out), manager.NumMethod())
	}
	return out
}

// callZero calls m's method name with zero arguments (a live context) and
// returns its error.
func callZero(m core.Manager, name string) error {
	f := reflect.ValueOf(m).MethodByName(name)
	args := make([]reflect.Value, f.Type().NumIn())
	for i := range args {
		args[i] = reflect.Zero(f.Type().In(i))
	}
	args[0] = reflect.ValueOf(context.Background())
	out := f.Call(args)
	err, _ := out[len(out)-1].Interface().(error)
	return err
}

// TestCompleteAnswersWhatABackendLacks: every call of a capability the
// backend lacks answers Unsupported naming the backend and the capability,
// and never reaches the backend.
func TestCompleteAnswersWhatABackendLacks(t *testing.T) {
	methods := optionalMethods(t)
	fake := &coretest.Manager{}
	m := coretest.Without(fake, "test-backend", core.Capabilities()...)
	for name, c := range methods {
		err := callZero(m, name)
		if !core.IsUnsupported(err) {
			t.Errorf("%s on a backend without %s: %v; want Unsupported", name, c, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "test-backend") || !strings.Contains(msg, string(c)) {
			t.Errorf("%s: %q does not name the backend and %q", name, msg, c)
		}
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("calls reached the backend: %v", calls)
	}
}

// backendOnly has only what every backend must: Complete finds no
// optional capability on it.
type backendOnly struct{ core.Backend }

// TestCompleteWithoutTheInterface: a backend that does not implement a
// capability at all gets the same answers, naming it.
func TestCompleteWithoutTheInterface(t *testing.T) {
	m := core.Complete("bare", backendOnly{&coretest.Manager{}})
	for name, c := range optionalMethods(t) {
		if err := callZero(m, name); !core.IsUnsupported(err) || !strings.Contains(err.Error(), string(c)) {
			t.Errorf("%s: %v; want Unsupported naming %q", name, err, c)
		}
	}
}

// TestCompleteKeepsWhatABackendHas: the capabilities a backend has reach
// it, whichever others it lacks.
func TestCompleteKeepsWhatABackendHas(t *testing.T) {
	fake := &coretest.Manager{}
	m := coretest.Without(fake, "test-backend", core.CapTemplates)
	for name, c := range optionalMethods(t) {
		err := callZero(m, name)
		if c == core.CapTemplates {
			if !core.IsUnsupported(err) {
				t.Errorf("%s: %v; want Unsupported", name, err)
			}
			continue
		}
		if core.IsUnsupported(err) {
			t.Errorf("%s (%s, which the backend has): %v", name, c, err)
		}
		if !slices.Contains(fake.Calls(), name) {
			t.Errorf("%s did not reach the backend", name)
		}
	}
}

// TestValidatingBeforeUnsupported: a malformed request to a capability the
// backend lacks is refused for its form, as on any backend; a well-formed
// one is Unsupported.
func TestValidatingBeforeUnsupported(t *testing.T) {
	m := core.Validating(coretest.Without(&coretest.Manager{}, "test-backend", core.CapVolumes), core.DefaultPolicy())
	ctx := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	if _, err := m.CreateVolume(ctx, "not a name/", 0); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("CreateVolume with a bad name: %v; want InvalidArgument", err)
	}
	if _, err := m.CreateVolume(ctx, "data", 0); !core.IsUnsupported(err) {
		t.Errorf("CreateVolume: %v; want Unsupported", err)
	}
}
