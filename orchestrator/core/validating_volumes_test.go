package core_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
)

// ListVolumes' tenant filter is an admin's, as ListSnapshots' is: another
// caller may name only its own tenant.
func TestListVolumesTenantFilterIsAdminOnly(t *testing.T) {
	fake := &coretest.Manager{ListVolumesFunc: func(context.Context, string) ([]core.Volume, error) { return nil, nil }}
	m := core.Validating(fake, core.DefaultPolicy())
	user := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	admin := core.WithCaller(t.Context(), core.Caller{Tenant: "acme", Admin: true})
	for _, tenant := range []string{"", "acme"} {
		if _, err := m.ListVolumes(user, tenant); err != nil {
			t.Errorf("a user listing tenant %q: %v", tenant, err)
		}
	}
	if _, err := m.ListVolumes(user, "beta"); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("a user listing another tenant: %v, want InvalidArgument", err)
	}
	if _, err := m.ListVolumes(admin, "beta"); err != nil {
		t.Errorf("an admin listing another tenant: %v", err)
	}
}
