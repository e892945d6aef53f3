package docker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Warm pools of templates (Config.WarmPoolTemplates): started, unclaimed
// sandboxes of a template's current version, for new users of its tenant
// asking for it with nothing a pool sandbox lacks (as the server's pool,
// pool.go). A pool follows its template: when a newer version is ready its
// sandboxes are replaced; while the template has no ready version (or is
// deleted) the pool is empty. A template pool's sandboxes found at start
// are removed (reconcile) and made again here.

// templatePoolInterval is how often the pools look at their templates
// (besides after each claim).
const templatePoolInterval = 5 * time.Second

// tplPool is one template's pool.
type tplPool struct {
	*warmPool
	tenant, name string
	size         int
	// template and version are what its sandboxes run; guarded by
	// warmPool.mu.
	template string
	version  int
}

// tplPools are the template pools, by "tenant/name".
type tplPools struct {
	wake  chan struct{}
	pools []*tplPool
}

// newTemplatePools makes the pools Config.WarmPoolTemplates asks for.
func newTemplatePools(cfg map[string]int) *tplPools {
	tp := &tplPools{wake: make(chan struct{}, 1)}
	for _, key := range slices.Sorted(maps.Keys(cfg)) {
		tenant, name, _ := strings.Cut(key, "/")
		tp.pools = append(tp.pools, &tplPool{warmPool: &warmPool{wake: tp.wake}, tenant: tenant, name: name, size: cfg[key]})
	}
	return tp
}

// ValidateWarmPoolTemplate checks a --warm-pool-template key: TENANT/NAME.
func ValidateWarmPoolTemplate(key string, n int) error {
	tenant, name, ok := strings.Cut(key, "/")
	if !ok {
		return fmt.Errorf("warm pool of a template %q: want TENANT/NAME=N", key)
	}
	if err := core.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("warm pool of a template %q: %v", key, err)
	}
	if err := core.ValidateTemplateName(name); err != nil {
		return fmt.Errorf("warm pool of a template %q: %v", key, err)
	}
	if n < 0 {
		return fmt.Errorf("warm pool of a template %q: %d sandboxes", key, n)
	}
	return nil
}

// count is the sandboxes all template pools hold or are making.
func (tp *tplPools) count() int {
	if tp == nil {
		return 0
	}
	n := 0
	for _, p := range tp.pools {
		n += p.count()
	}
	return n
}

// templatePoolFor returns the pool of spec's template version, if any;
// poolFor says whether its sandboxes can be shaped to spec.
func (m *Manager) templatePoolFor(spec sandboxSpec) *tplPool {
	if m.tplPools == nil || spec.image == "" {
		return nil
	}
	for _, p := range m.tplPools.pools {
		p.mu.Lock()
		ok := p.tenant == spec.user.tenant && p.template == spec.template && p.version == spec.templateVersion
		p.mu.Unlock()
		if ok {
			return p
		}
	}
	return nil
}

// templatePoolLoop keeps the template pools full until ctx ends.
func (m *Manager) templatePoolLoop(ctx context.Context) {
	t := time.NewTicker(templatePoolInterval)
	defer t.Stop()
	for {
		for _, p := range m.tplPools.pools {
			if ctx.Err() != nil {
				return
			}
			m.fillTemplatePool(ctx, p)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.tplPools.wake:
		}
	}
}

// fillTemplatePool brings p to its template's current version and size.
func (m *Manager) fillTemplatePool(ctx context.Context, p *tplPool) {
	id, ver, img, err := m.resolveTemplate(core.Caller{Tenant: p.tenant}, p.name)
	if err != nil {
		id, ver = "", 0 // no ready version: the pool empties
	}
	p.mu.Lock()
	changed := p.template != id || p.version != ver
	var stale []*sandbox
	if changed {
		stale, p.ready = p.ready, nil
		p.template, p.version = id, ver
	}
	p.mu.Unlock()
	for _, sb := range stale {
		m.discard(ctx, sb, "warm-pool sandbox", fmt.Sprintf("template %s/%s moved to version %d", p.tenant, p.name, ver))
	}
	if id == "" {
		return
	}
	for ctx.Err() == nil && m.templatePoolHasRoom(p) {
		sb, err := m.create(ctx, sandboxSpec{pool: true, limits: m.cfg.DefaultLimits, image: img, template: id, templateVersion: ver})
		if err == nil {
			if err = m.warmUp(ctx, sb); err != nil {
				m.discard(ctx, sb, "warm-pool sandbox", "its warm-up failed")
			}
		}
		p.mu.Lock()
		p.filling--
		current := p.template == id && p.version == ver
		if err == nil && current {
			p.ready = append(p.ready, sb)
		}
		p.mu.Unlock()
		if err != nil {
			m.log.Warn("template warm pool: create sandbox; will retry", "tenant", p.tenant, "template", p.name, "error", err)
			return
		}
		if !current {
			m.discard(ctx, sb, "warm-pool sandbox", "its template moved on while it started")
			return
		}
		m.log.Debug("template warm pool: sandbox ready", "sandbox_id", sb.id, "tenant", p.tenant, "template", p.name, "version", ver)
	}
}

// templatePoolHasRoom is poolHasRoom for a template's pool.
func (m *Manager) templatePoolHasRoom(p *tplPool) bool {
	all, _ := m.reg.countRunning("")
	all += int(m.creating.Load()) + m.pooled()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ready) + p.filling
	if n >= p.size || (m.cfg.MaxSandboxes > 0 && all >= m.cfg.MaxSandboxes) {
		return false
	}
	p.filling++
	return true
}
