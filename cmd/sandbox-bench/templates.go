package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	sandboxclient "github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// The template figures: what a template build costs, first and from the
// step cache, and what a sandbox of a template costs to start next to one
// of sandboxd's own image. The spec is small and needs no network (an env
// step, a run step writing a file), so the figures are sandboxd's own
// work: the step's container and commit, and the last layer it always
// makes (the driver, the io sidecar and the statx shim copied again).
var (
	mTplFirstBuild   = metric{"template_first_build", "template build, first (force: no step cached)", "s", true, "faster", "slower"}
	mTplCacheHit     = metric{"template_cache_hit", "template build, new name, every step cached", "s", true, "faster", "slower"}
	mTplFirstSandbox = metric{"template_first_sandbox", "new user's first result from a template (no pool)", "ms", true, "faster", "slower"}
)

// templateSpec is the benchmark's template: no apt, since the bench's
// sandboxd may have no network.
func templateSpec() *sandboxv1.TemplateSpec {
	return &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{
		{Step: &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{Vars: map[string]string{"BENCH_TEMPLATE": "1"}}}},
		{Step: &sandboxv1.TemplateStep_Run{Run: "mkdir -p /opt/bench && echo bench > /opt/bench/stamp"}},
	}}
}

// buildTimed builds a template and returns the call's wall time, the
// time from the build's "last layer" log line to its end (-1 when the
// log had no such line), the version and its image's tag.
func (b *bench) buildTimed(ctx context.Context, name string, force bool) (total, lastLayer time.Duration, v *sandboxv1.TemplateVersion, tag string, err error) {
	var llStart time.Time
	start := time.Now()
	t, v, err := b.c.sb.BuildTemplate(ctx, name, templateSpec(), force, func(l *sandboxv1.TemplateBuildLine) {
		if strings.HasPrefix(l.GetLine(), "[sandboxd] last layer") && l.GetTime() != nil {
			llStart = l.GetTime().AsTime()
		}
	})
	total = time.Since(start)
	if err != nil {
		return total, -1, v, "", err
	}
	tag = fmt.Sprintf("sandboxd-template:%s-v%d", t.GetId(), v.GetVersion())
	lastLayer = -1
	if !llStart.IsZero() && v.GetFinishedAt() != nil {
		lastLayer = v.GetFinishedAt().AsTime().Sub(llStart)
	}
	return total, lastLayer, v, tag, nil
}

// templates measures a first build, a build from the step cache, an
// unchanged rebuild, and a new user's first result from the template
// against one from sandboxd's image with the same options.
func (b *bench) templates(ctx context.Context) error {
	all := []metric{mTplFirstBuild, mTplCacheHit, mTplFirstSandbox}
	rounds := b.cfg.TemplateRounds
	var names, tags []string // tags: the built images', sandboxd-template:ID-vN
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, n := range names {
			if err := b.c.sb.DeleteTemplate(dctx, n); err != nil {
				b.progress("deleting template %s: %v", n, err)
			}
		}
		if b.d != nil {
			// sandboxd removes a deleted template's image just after;
			// the self-started one must not stop before.
			waitImagesGone(dctx, tags, 15*time.Second, b.progress)
		}
	}()
	var first, firstLL, hit, hitLL, same, tplSB, defSB []float64
	var size int64
	for i := range rounds {
		// A first build: force skips the step cache, so every step runs.
		firstName := fmt.Sprintf("bench-%s-first-%d", b.runID, i)
		names = append(names, firstName)
		d, ll, v, tag, err := b.buildTimed(ctx, firstName, true)
		if err != nil {
			b.fail(err, all...)
			return err
		}
		if v.GetCached() {
			err := fmt.Errorf("the forced build of %s says it came from the cache", firstName)
			b.fail(err, all...)
			return err
		}
		tags = append(tags, tag)
		first = append(first, d.Seconds())
		if ll >= 0 {
			firstLL = append(firstLL, ll.Seconds())
		}
		size = v.GetSizeBytes()

		// The same steps under a new name: every step from the cache,
		// only the last layer made.
		hitName := fmt.Sprintf("bench-%s-hit-%d", b.runID, i)
		names = append(names, hitName)
		d, ll, v, tag, err = b.buildTimed(ctx, hitName, false)
		if err != nil {
			b.fail(err, all...)
			return err
		}
		if !v.GetCached() {
			err := fmt.Errorf("the build of %s with the steps of %s did not come from the step cache", hitName, firstName)
			b.fail(err, all...)
			return err
		}
		tags = append(tags, tag)
		hit = append(hit, d.Seconds())
		if ll >= 0 {
			hitLL = append(hitLL, ll.Seconds())
		}

		// The same name and spec again: the existing version, nothing
		// built.
		start := time.Now()
		_, v2, err := b.c.sb.BuildTemplate(ctx, hitName, templateSpec(), false, nil)
		if err != nil {
			b.fail(err, all...)
			return err
		}
		if v2.GetVersion() != v.GetVersion() {
			err := fmt.Errorf("rebuilding %s unchanged made version %d, want the existing %d", hitName, v2.GetVersion(), v.GetVersion())
			b.fail(err, all...)
			return err
		}
		same = append(same, ms(time.Since(start)))

		// A new user's first result, from the template and from
		// sandboxd's image, with the same env (so neither is pooled);
		// neither always first.
		env := map[string]string{"BENCH_ROUND": fmt.Sprint(i)}
		order := []string{firstName, ""}
		if i%2 == 1 {
			order = []string{"", firstName}
		}
		for _, tpl := range order {
			opts := []sandboxclient.AcquireOption{sandboxclient.WithEnv(env)}
			user := fmt.Sprintf("tpl-default-%d", i)
			if tpl != "" {
				opts = append(opts, sandboxclient.WithTemplate(tpl))
				user = fmt.Sprintf("tpl-template-%d", i)
			}
			start := time.Now()
			acq, err := b.c.sb.Acquire(ctx, b.user(user), opts...)
			if err != nil {
				b.fail(err, all...)
				return err
			}
			b.mu.Lock()
			b.created = append(b.created, acq.ID)
			b.mu.Unlock()
			if _, err := b.c.expect(ctx, acq.ID, "1 + 1", "2"); err != nil {
				b.fail(err, all...)
				return err
			}
			t := ms(time.Since(start))
			if tpl != "" {
				// The template's file is there.
				if _, err := b.c.expect(ctx, acq.ID, "open('/opt/bench/stamp').read().strip()", "'bench'"); err != nil {
					b.fail(err, all...)
					return err
				}
				tplSB = append(tplSB, t)
			} else {
				defSB = append(defSB, t)
			}
			if err := b.deleteSandbox(ctx, acq.ID); err != nil {
				b.fail(err, all...)
				return err
			}
		}
	}
	lastLayer := func(xs []float64) string {
		if len(xs) == 0 {
			return "n/a"
		}
		return fmtNum(median(xs))
	}
	note := fmt.Sprintf("median of %d rounds; spec: an env step and a run step writing a file (no apt), image %s MB", rounds, fmtNum(float64(size)/1e6))
	b.rep.add(row(mTplFirstBuild, median(first), "", nan, nil,
		note+fmt.Sprintf("; BuildTemplate with force, to the build's end; of it the last layer (driver, io sidecar, statx shim copied, committed) %s s", lastLayer(firstLL))))
	b.rep.add(row(mTplCacheHit, median(hit), "first build (same run, median)", median(first), nil,
		fmt.Sprintf("the same steps under a new name, no force: every step from the step cache, of it the last layer %s s; the same name and spec again (the existing version returned, nothing built) %s ms",
			lastLayer(hitLL), fmtNum(median(same)))))
	b.rep.add(row(mTplFirstSandbox, median(tplSB), "sandboxd's image, same options (median)", median(defSB), nil,
		fmt.Sprintf("AcquireSandbox (WithTemplate) to the result of 1 + 1, median of %d new users each; both with the same env, so neither from a warm pool", rounds)))
	return nil
}

// waitImagesGone waits until none of the images tags name is left in the
// Docker engine, or limit passed.
func waitImagesGone(ctx context.Context, tags []string, limit time.Duration, progress func(string, ...any)) {
	deadline := time.Now().Add(limit)
	for _, t := range tags {
		for exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", t).Run() == nil {
			if time.Now().After(deadline) || ctx.Err() != nil {
				progress("template image %s is still there after the template was deleted", t)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
