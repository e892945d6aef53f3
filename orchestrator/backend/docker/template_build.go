package docker

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// How a template is built. Not with a Dockerfile: each step that changes
// files runs in a container of its own, made from the previous step's
// image and committed into the next, so that sandboxd chooses what a
// Dockerfile's RUN could not:
//
//   - the runtime: the server's (gVisor under --runtime runsc, as
//     RuntimeGVisorBuild), so a template's commands, run as root, are as
//     contained as a sandbox's;
//   - the network: none, or (with --allow-network) the egress gateway's,
//     under a policy allowing only the Debian mirrors the host's apt uses
//     (Config.TemplateBuildAllow replaces them);
//   - the bounds: memory, CPU and pids as the largest sandbox's, the
//     build's time, and each step's added bytes;
//   - the last layer: the driver, the io sidecar and the statx shim copied
//     again from the sandbox image, and the user, working directory,
//     entrypoint and command set back, so no step can replace what runs a
//     sandbox.
//
// Files come from uploaded archives: the Docker engine unpacks them
// (CopyToContainer, which never writes outside the container's root),
// after sandboxd has picked the entries under the step's source, renamed
// them under its destination and set their owner and mode.
//
// Every image-changing step's image is labelled with a cache key: the
// hash of the tenant, the base image and the steps so far. A later build
// whose steps begin the same starts from the last cached image, as
// Docker's layer cache would; force skips the cache.

const (
	labelTemplateBuild = "sandboxd.template-build" // on build containers: the template's ID
	labelTemplateCache = "sandboxd.template-cache" // on step images: their cache key
	// maxStepGrowth bounds the bytes one step may add to the image.
	maxStepGrowth = 8 << 30
	// buildContainerPids bounds a build step's processes.
	buildContainerPids = 1024
)

// BuildTemplate starts a build (see core.Manager).
func (m *Manager) BuildTemplate(ctx context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
	if err := m.templatesOn(); err != nil {
		return core.Template{}, core.TemplateVersion{}, err
	}
	c := core.CallerOf(ctx)
	// The base's image, before the lock (a Docker call).
	baseImage, err := m.templateBase(ctx, c, spec.Base)
	if err != nil {
		return core.Template{}, core.TemplateVersion{}, err
	}
	for _, key := range spec.Archives() {
		if _, err := os.Stat(m.tpls.filePath(c.Tenant, key)); err != nil {
			return core.Template{}, core.TemplateVersion{}, core.Preconditionf("template archive %s has not been uploaded (UploadTemplateFile)", key)
		}
	}
	hash := spec.SpecHash(baseImage)
	use, _ := m.templateUse()

	t := m.tpls
	t.mu.Lock()
	defer t.mu.Unlock()
	tm := t.find(c.Tenant, name)
	if tm == nil {
		n := 0
		for _, o := range t.byID {
			if o.Tenant == c.Tenant {
				n++
			}
		}
		if n >= m.cfg.MaxTemplatesPerTenant {
			return core.Template{}, core.TemplateVersion{}, core.Errorf(core.ErrResourceExhausted,
				"tenant %s has %d templates, the server's limit (sandboxd --max-templates-per-tenant); delete one first", c.Tenant, n)
		}
		tm = &tplMeta{ID: core.NewTemplateID(), Name: name, Tenant: c.Tenant, CreatedAt: time.Now().UTC()}
	}
	if last, ok := lastVersion(tm); ok && last.State == core.TemplateBuilding {
		return core.Template{}, core.TemplateVersion{}, core.Preconditionf("template %s is building version %d; follow it, or delete the template to cancel it", name, last.Version)
	}
	now := time.Now().UTC()
	v := tplVersion{Version: nextVersion(tm), SpecHash: hash, Spec: spec, BaseImage: baseImage, StartedAt: now}
	if cur, ok := tm.current(); ok && cur.SpecHash == hash && !force {
		// Unchanged: nothing to build, no new version.
		return m.templateToCore(tm, use), cur.toCore(use[fmt.Sprintf("%s/%d", tm.ID, cur.Version)]), nil
	}
	// The tenant's cap first: the narrowest, which it can free itself.
	if n := t.buildingBy[c.Tenant]; n >= m.cfg.MaxTemplateBuildsPerTenant {
		return core.Template{}, core.TemplateVersion{}, core.Errorf(core.ErrResourceExhausted,
			"tenant %s has %d template builds running, its cap (sandboxd --template-builds-per-tenant); try again when one ends, or delete a template to cancel its build", c.Tenant, n)
	}
	if t.building >= m.cfg.TemplateBuilds {
		return core.Template{}, core.TemplateVersion{}, core.Errorf(core.ErrResourceExhausted,
			"%d template builds are running, the server's limit (sandboxd --template-builds); try again when one ends", t.building)
	}
	v.State = core.TemplateBuilding
	tm.Versions = append(tm.Versions, v)
	if err := t.write(tm); err != nil {
		tm.Versions = tm.Versions[:len(tm.Versions)-1]
		return core.Template{}, core.TemplateVersion{}, err
	}
	t.byID[tm.ID] = tm
	bctx, cancel := context.WithTimeout(m.bgCtx, m.cfg.TemplateBuildTimeout)
	run := &tplRun{notify: make(chan struct{}), cancel: cancel}
	t.runs[tm.ID] = run
	t.building++
	t.buildingBy[c.Tenant]++
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancel()
		m.runTemplateBuild(bctx, tm.ID, tm.Name, c.Tenant, v, force, run)
	}()
	m.log.Info("template build started", "template_id", tm.ID, "tenant", c.Tenant, "name", name, "version", v.Version, "spec_hash", hash)
	return m.templateToCore(tm, use), v.toCore(0), nil
}

func lastVersion(tm *tplMeta) (tplVersion, bool) {
	if len(tm.Versions) == 0 {
		return tplVersion{}, false
	}
	return tm.Versions[len(tm.Versions)-1], true
}

func nextVersion(tm *tplMeta) int {
	if l, ok := lastVersion(tm); ok {
		return l.Version + 1
	}
	return 1
}

// templateBase is the image ID a spec's base names: the sandbox image, or
// the latest ready version of another template of the tenant.
func (m *Manager) templateBase(ctx context.Context, c core.Caller, base string) (string, error) {
	if base == "" {
		info, err := m.docker.ImageInspect(ctx, m.cfg.Image)
		if err != nil {
			if isDockerNotFound(err) {
				return "", m.imageMissing()
			}
			return "", dockerError("inspect the sandbox image", err)
		}
		return info.ID, nil
	}
	_, _, img, err := m.resolveTemplate(c, base)
	if err != nil {
		return "", fmt.Errorf("base: %w", err)
	}
	return img, nil
}

// buildState is what the steps so far have set: the image and the
// configuration later steps run with.
type buildState struct {
	image    string
	env      map[string]string
	workdir  string
	user     string // core.TemplateUserRoot or TemplateUserSandbox
	cacheKey string
}

// runTemplateBuild runs a build to its end and records how it ended.
func (m *Manager) runTemplateBuild(ctx context.Context, id, name, tenant string, v tplVersion, force bool, run *tplRun) {
	logf, err := os.OpenFile(m.tpls.logPath(id, v.Version), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		m.log.Error("template build: open its log", "template_id", id, "error", err)
	}
	var seq int64
	emit := func(line string) {
		line = core.Truncate(strings.ToValidUTF8(strings.TrimRight(line, "\r\n"), "\uFFFD"), core.MaxTemplateLogLine)
		run.mu.Lock()
		if run.bytes > core.MaxTemplateLogBytes {
			run.mu.Unlock()
			return
		}
		run.bytes += len(line)
		if run.bytes > core.MaxTemplateLogBytes {
			line = fmt.Sprintf("[sandboxd] the log is cut here: it passed %d bytes", core.MaxTemplateLogBytes)
		}
		seq++
		ev := core.TemplateBuildEvent{Seq: seq, Time: time.Now().UTC(), Line: line}
		run.events = append(run.events, ev)
		close(run.notify)
		run.notify = make(chan struct{})
		run.mu.Unlock()
		if logf != nil {
			b, _ := json.Marshal(ev)
			logf.Write(append(b, '\n'))
		}
	}
	start := time.Now()
	img, size, cached, err := m.buildTemplateImage(ctx, id, tenant, v, force, emit)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = core.Errorf(core.ErrDeadlineExceeded, "the build ran past its limit of %v (sandboxd --template-build-timeout)", m.cfg.TemplateBuildTimeout)
	} else if err != nil && ctx.Err() != nil {
		err = core.Preconditionf("the build was cancelled (the template was deleted, or sandboxd is stopping)")
	}
	if err == nil {
		// Tagged, so that a prune of dangling images keeps it.
		if terr := m.tplEngine.ImageTag(context.WithoutCancel(ctx), img, fmt.Sprintf("%s:%s-v%d", templateImageRepo, id, v.Version)); terr != nil {
			err = dockerError("tag the template's image", terr)
		}
	}
	v.FinishedAt = time.Now().UTC()
	if err != nil {
		v.State, v.Reason = core.TemplateFailed, core.Truncate(strings.TrimPrefix(err.Error(), classPrefix(err)), 2048)
		v.Class = core.ErrFailedPrecondition.Error()
		if c := core.ClassOf(err); c != nil {
			v.Class = c.Error()
		} else if !errors.Is(err, context.Canceled) {
			v.Class = core.ErrUnavailable.Error()
		}
		emit("[sandboxd] build failed: " + v.Reason)
	} else {
		v.State, v.Image, v.SizeBytes, v.Cached = core.TemplateReady, img, size, cached
		emit(fmt.Sprintf("[sandboxd] ready in %.1fs: image %s, %d bytes", time.Since(start).Seconds(), shortID(img), size))
	}
	if logf != nil {
		logf.Close()
	}
	t := m.tpls
	t.mu.Lock()
	if tm := t.byID[id]; tm != nil {
		if p, ok := tm.version(v.Version); ok {
			*p = v
		}
		if werr := t.write(tm); werr != nil {
			m.log.Error("template build: write template.json", "template_id", id, "error", werr)
		}
	}
	delete(t.runs, id)
	t.building--
	if t.buildingBy[tenant]--; t.buildingBy[tenant] <= 0 {
		delete(t.buildingBy, tenant)
	}
	t.mu.Unlock()
	done := v.toCore(0)
	run.mu.Lock()
	run.done = &done
	if err != nil {
		run.err = v.failure(name)
	}
	close(run.notify)
	run.notify = make(chan struct{})
	run.mu.Unlock()
	m.log.Info("template build ended", "template_id", id, "name", name, "version", v.Version, "state", v.State, "reason", v.Reason, "seconds", time.Since(start).Seconds())
	if err == nil {
		go m.gcTemplates(context.WithoutCancel(m.bgCtx))
	}
}

// classPrefix is the "class: " an error's message starts with, if any.
func classPrefix(err error) string {
	if c := core.ClassOf(err); c != nil && strings.HasPrefix(err.Error(), c.Error()+": ") {
		return c.Error() + ": "
	}
	return ""
}

func shortID(img string) string {
	s := strings.TrimPrefix(img, "sha256:")
	if len(s) > 12 {
		s = s[:12]
	}
	return s
}

// buildTemplateImage runs v's steps over its base image and returns the
// finished image, its size, and whether every step came from the cache.
func (m *Manager) buildTemplateImage(ctx context.Context, id, tenant string, v tplVersion, force bool, emit func(string)) (string, int64, bool, error) {
	base, err := m.docker.ImageInspect(ctx, v.BaseImage)
	if err != nil {
		return "", 0, false, dockerError("inspect the base image", err)
	}
	st := buildState{image: v.BaseImage, env: map[string]string{}, user: core.TemplateUserRoot}
	st.cacheKey = hashStrings("sandboxd-template-v1", tenant, v.BaseImage)
	net, err := m.buildNetwork(ctx, emit)
	if err != nil {
		return "", 0, false, err
	}
	defer net.close()
	cached := true
	for i, step := range v.Spec.Steps {
		if err := ctx.Err(); err != nil {
			return "", 0, false, err
		}
		b, _ := json.Marshal(step)
		st.cacheKey = hashStrings(st.cacheKey, string(b))
		desc := describeStep(step)
		switch {
		case step.Env != nil:
			maps.Copy(st.env, step.Env)
			emit(fmt.Sprintf("[sandboxd] step %d/%d: %s", i+1, len(v.Spec.Steps), desc))
			continue
		case step.Workdir != "":
			st.workdir = step.Workdir
			emit(fmt.Sprintf("[sandboxd] step %d/%d: %s", i+1, len(v.Spec.Steps), desc))
			continue
		case step.User != "":
			st.user = step.User
			emit(fmt.Sprintf("[sandboxd] step %d/%d: %s", i+1, len(v.Spec.Steps), desc))
			continue
		}
		if !force {
			if img := m.cachedStep(ctx, st.cacheKey); img != "" {
				emit(fmt.Sprintf("[sandboxd] step %d/%d: %s (cached)", i+1, len(v.Spec.Steps), desc))
				st.image = img
				continue
			}
		}
		cached = false
		emit(fmt.Sprintf("[sandboxd] step %d/%d: %s", i+1, len(v.Spec.Steps), desc))
		img, err := m.buildStep(ctx, id, tenant, st, step, net, emit)
		if err != nil {
			return "", 0, false, fmt.Errorf("step %d (%s): %w", i+1, desc, err)
		}
		st.image = img
	}
	// sandboxd's last layer, always made (it is cheap, and it is what
	// keeps the driver sandboxd's).
	emit("[sandboxd] last layer: the driver, the io sidecar and the statx shim from the sandbox image")
	img, err := m.lastLayer(ctx, id, st, base)
	if err != nil {
		return "", 0, false, fmt.Errorf("the last layer: %w", err)
	}
	info, err := m.docker.ImageInspect(ctx, img)
	if err != nil {
		return "", 0, false, dockerError("inspect the built image", err)
	}
	return img, info.Size, cached, nil
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// describeStep is a step in one short line for the log.
func describeStep(s core.TemplateStep) string {
	switch {
	case s.Apt != nil:
		return "apt " + strings.Join(s.Apt, " ")
	case s.Copy != nil:
		return fmt.Sprintf("copy %s from archive %s… to %s", s.Copy.Src, s.Copy.Archive[:12], s.Copy.Dest)
	case s.Env != nil:
		return "env " + strings.Join(slices.Sorted(maps.Keys(s.Env)), " ")
	case s.Workdir != "":
		return "workdir " + s.Workdir
	case s.User != "":
		return "user " + s.User
	}
	return "run " + core.Truncate(s.Run, 120)
}

// cachedStep returns the image a step with cacheKey made earlier, if any.
func (m *Manager) cachedStep(ctx context.Context, key string) string {
	imgs, err := m.tplEngine.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelTemplateCache+"="+key))})
	if err != nil || len(imgs) == 0 {
		return ""
	}
	return imgs[0].ID
}

// buildStep runs one file-changing step in a container of st.image and
// commits it.
func (m *Manager) buildStep(ctx context.Context, id, tenant string, st buildState, step core.TemplateStep, net *buildNet, emit func(string)) (string, error) {
	user, cmd := st.user, []string(nil)
	switch {
	case step.Apt != nil:
		user = core.TemplateUserRoot
		cmd = []string{"/bin/sh", "-c", "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " +
			strings.Join(step.Apt, " ") + " && apt-get clean && rm -rf /var/lib/apt/lists/*"}
	case step.Run != "":
		cmd = []string{"/bin/sh", "-c", step.Run}
	case step.Copy != nil:
		cmd = []string{"/bin/true"}
	}
	uid := "0:0"
	if user == core.TemplateUserSandbox {
		uid = containerUser
	}
	env := make([]string, 0, len(st.env))
	for _, k := range slices.Sorted(maps.Keys(st.env)) {
		env = append(env, k+"="+st.env[k])
	}
	pids := int64(buildContainerPids)
	cfg := &container.Config{
		Image: st.image, User: uid, Env: env, WorkingDir: st.workdir,
		Entrypoint: cmd, // and so no Cmd of the image's
		Labels:     map[string]string{labelTemplateBuild: id, labels.StateDir: m.cfg.StateDir},
	}
	rt := m.cfg.Runtime
	if rt == core.RuntimeGVisor {
		rt = RuntimeGVisorBuild
	}
	host := &container.HostConfig{
		NetworkMode: "none",
		Runtime:     rt,
		SecurityOpt: []string{"no-new-privileges"},
		Resources: container.Resources{Memory: m.cfg.MaxLimits.MemoryBytes, MemorySwap: m.cfg.MaxLimits.MemoryBytes,
			NanoCPUs: m.cfg.MaxLimits.NanoCPUs, PidsLimit: &pids},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "16m", "max-file": "1"}},
	}
	if step.Copy == nil {
		net.apply(host)
	}
	resp, err := m.docker.ContainerCreate(ctx, cfg, host, nil, nil, "")
	if err != nil {
		return "", dockerError("create the step's container", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
		m.docker.ContainerRemove(rctx, resp.ID, container.RemoveOptions{Force: true})
		cancel()
	}()
	if step.Copy != nil {
		if err := m.copyArchive(ctx, resp.ID, tenant, *step.Copy); err != nil {
			return "", err
		}
	} else if err := m.runStepContainer(ctx, resp.ID, emit); err != nil {
		return "", err
	}
	info, _, err := m.tplEngine.ContainerInspectWithRaw(ctx, resp.ID, true)
	if err != nil {
		return "", dockerError("inspect the step's container", err)
	}
	if info.SizeRw != nil && *info.SizeRw > maxStepGrowth {
		return "", core.Errorf(core.ErrResourceExhausted, "the step added %d bytes to the image; one step may add at most %d", *info.SizeRw, maxStepGrowth)
	}
	lbl := maps.Clone(base0Labels(info))
	lbl[labelTemplateCache] = st.cacheKey
	cr, err := m.tplEngine.ContainerCommit(ctx, resp.ID, container.CommitOptions{Config: &container.Config{
		Env: info.Config.Env, Labels: lbl, User: info.Config.User, WorkingDir: info.Config.WorkingDir,
		Entrypoint: info.Config.Entrypoint, Cmd: info.Config.Cmd,
	}})
	if err != nil {
		return "", dockerError("commit the step", err)
	}
	return cr.ID, nil
}

// base0Labels are the labels a step's image keeps: its container's,
// without the build's own.
func base0Labels(info container.InspectResponse) map[string]string {
	out := map[string]string{}
	if info.Config != nil {
		for k, v := range info.Config.Labels {
			if k != labelTemplateBuild && k != labelTemplateCache {
				out[k] = v
			}
		}
	}
	return out
}

// runStepContainer starts a step's container, streams its output into the
// build's log and waits for it: a non-zero exit fails the step.
func (m *Manager) runStepContainer(ctx context.Context, cid string, emit func(string)) error {
	waitC, errC := m.tplEngine.ContainerWait(ctx, cid, container.WaitConditionNextExit)
	if err := m.docker.ContainerStart(ctx, cid, container.StartOptions{}); err != nil {
		return dockerError("start the step's container", err)
	}
	logs, err := m.tplEngine.ContainerLogs(ctx, cid, container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		return dockerError("read the step's output", err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, pw, logs)
		pw.CloseWithError(err)
	}()
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		emit(sc.Text())
	}
	if sc.Err() != nil {
		// A line past 1 MiB: drain the rest unread into the log's bound.
		io.Copy(io.Discard, pr)
	}
	logs.Close()
	select {
	case w := <-waitC:
		if w.Error != nil {
			return fmt.Errorf("wait for the step: %s", w.Error.Message)
		}
		if w.StatusCode != 0 {
			return core.Preconditionf("the command exited with status %d", w.StatusCode)
		}
		return nil
	case err := <-errC:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return dockerError("wait for the step", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// copyArchive puts a Copy step's files into a created container.
func (m *Manager) copyArchive(ctx context.Context, cid, tenant string, c core.TemplateCopy) error {
	f, err := os.Open(m.tpls.filePath(tenant, c.Archive))
	if err != nil {
		return core.Preconditionf("template archive %s is missing: upload it again", c.Archive)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	var n int
	go func() {
		var err error
		n, err = filterArchive(f, pw, c, maxStepGrowth)
		pw.CloseWithError(err)
	}()
	err = m.tplEngine.CopyToContainer(ctx, cid, "/", pr, container.CopyToContainerOptions{})
	pr.CloseWithError(err)
	if err != nil {
		var ae *archiveError
		if errors.As(err, &ae) {
			return ae.err
		}
		return dockerError("copy the files into the image", err)
	}
	if n == 0 {
		return core.Preconditionf("copy: the archive has nothing at %q", c.Src)
	}
	return nil
}

// archiveError marks a problem of the uploaded archive itself.
type archiveError struct{ err error }

func (e *archiveError) Error() string { return e.err.Error() }

// filterArchive writes to w the entries of the archive r (a tar, plain
// or gzip) that c.Src names, renamed under c.Dest as Docker's COPY would
// place them, owned by c.Owner and with c.Mode if set, and returns how
// many it wrote, failing past max bytes of content (a small gzip stream
// can unpack to any size). The archive is the tenant's upload, hostile input:
// names are cleaned and anything outside Src skipped, device files and
// links that leave the copy dropped; the engine then writes only inside
// the container's root.
func filterArchive(r io.Reader, w io.Writer, c core.TemplateCopy, max int64) (int, error) {
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, &archiveError{core.Preconditionf("copy: archive %s… is not a valid gzip stream: %v", c.Archive[:12], err)}
		}
		defer zr.Close()
		in = zr
	}
	tr, tw := tar.NewReader(in), tar.NewWriter(w)
	uid := 0
	if c.Owner == core.TemplateUserSandbox {
		uid = sandboxUID
	}
	destDir := strings.HasSuffix(c.Dest, "/")
	dest := path.Clean(c.Dest)
	target := func(name string, isDir bool) (string, bool) {
		name = path.Clean(strings.TrimPrefix(name, "./"))
		if name == ".." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			return "", false
		}
		switch {
		case c.Src == ".":
			if name == "." {
				return dest, true
			}
			return path.Join(dest, name), true
		case name == c.Src:
			// A directory is Dest itself (its contents go in it, as
			// COPY dir/ does); a file goes into Dest when Dest is one.
			if destDir && !isDir {
				return path.Join(dest, path.Base(name)), true
			}
			return dest, true
		case strings.HasPrefix(name, c.Src+"/"):
			// A directory's contents go into Dest, as COPY dir/ does.
			return path.Join(dest, strings.TrimPrefix(name, c.Src+"/")), true
		}
		return "", false
	}
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, &archiveError{core.Preconditionf("copy: archive %s… is not a valid tar archive: %v", c.Archive[:12], err)}
		}
		to, ok := target(h.Name, h.Typeflag == tar.TypeDir)
		if !ok {
			continue
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		case tar.TypeLink:
			lt, ok := target(h.Linkname, false)
			if !ok {
				continue
			}
			h.Linkname = strings.TrimPrefix(lt, "/")
		default:
			continue // devices, FIFOs, and anything else: dropped
		}
		h.Name = strings.TrimPrefix(to, "/")
		if h.Typeflag == tar.TypeDir {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = uid, uid, "", ""
		if c.Mode != 0 && h.Typeflag != tar.TypeSymlink {
			h.Mode = int64(c.Mode)
		} else {
			h.Mode &= 0o777 // no setuid, setgid or sticky bits from an upload
		}
		h.PAXRecords, h.Xattrs = nil, nil //nolint:staticcheck // dropped: no capabilities or ACLs from an upload
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return n, err
		}
		if h.Typeflag == tar.TypeReg {
			if max -= h.Size; max < 0 {
				return n, &archiveError{core.Errorf(core.ErrResourceExhausted, "copy: archive %s… unpacks to more than the %d bytes one step may add", c.Archive[:12], maxStepGrowth)}
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return n, &archiveError{core.Preconditionf("copy: archive %s… is truncated: %v", c.Archive[:12], err)}
			}
		}
		n++
	}
	return n, tw.Close()
}

// sandboxdPaths are what the last layer copies again from the sandbox
// image (sandbox-image/Dockerfile): what runs a sandbox.
var sandboxdPaths = []string{"/usr/local/bin/sandbox-driver", "/usr/local/bin/sandbox-iosidecar", "/usr/local/lib/sandboxd", "/etc/ld.so.preload"}

// lastLayer lays sandboxd's files from the sandbox image over st.image
// and commits the template's image with the sandbox's user, working
// directory, entrypoint and command, and the steps' env.
func (m *Manager) lastLayer(ctx context.Context, id string, st buildState, base image.InspectResponse) (string, error) {
	mk := func(img string) (string, func(), error) {
		resp, err := m.docker.ContainerCreate(ctx, &container.Config{Image: img, Entrypoint: []string{"/bin/true"},
			Labels: map[string]string{labelTemplateBuild: id, labels.StateDir: m.cfg.StateDir}},
			&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
		if err != nil {
			return "", nil, dockerError("create a container for the last layer", err)
		}
		return resp.ID, func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), containerRemoveTimeout)
			m.docker.ContainerRemove(rctx, resp.ID, container.RemoveOptions{Force: true})
			cancel()
		}, nil
	}
	src, done1, err := mk(m.cfg.Image)
	if err != nil {
		return "", err
	}
	defer done1()
	dst, done2, err := mk(st.image)
	if err != nil {
		return "", err
	}
	defer done2()
	for _, p := range sandboxdPaths {
		rc, _, err := m.tplEngine.CopyFromContainer(ctx, src, p)
		if err != nil {
			return "", dockerError("read "+p+" from the sandbox image", err)
		}
		err = m.tplEngine.CopyToContainer(ctx, dst, path.Dir(p), rc, container.CopyToContainerOptions{})
		rc.Close()
		if err != nil {
			return "", dockerError("write "+p+" into the template's image", err)
		}
	}
	// The env: the sandbox image's, then the steps' (a step may change
	// PATH or add its own).
	env := map[string]string{}
	if base.Config != nil {
		for _, kv := range base.Config.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	maps.Copy(env, st.env)
	envList := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}
	sbx, err := m.docker.ImageInspect(ctx, m.cfg.Image)
	if err != nil {
		return "", dockerError("inspect the sandbox image", err)
	}
	cfg := &container.Config{Env: envList, User: containerUser, WorkingDir: "/workspace",
		// The labels of the containers and parents are merged into a
		// commit's: the cache key is blanked, so the finished image is no
		// step's.
		Labels: map[string]string{"sandboxd.template": id, labelTemplateCache: "", labelTemplateBuild: "",
			// Whose it is: another sandboxd on the engine leaves it alone.
			labels.StateDir: m.cfg.StateDir}}
	if sbx.Config != nil {
		cfg.Entrypoint, cfg.Cmd = sbx.Config.Entrypoint, sbx.Config.Cmd
	}
	cr, err := m.tplEngine.ContainerCommit(ctx, dst, container.CommitOptions{Config: cfg})
	if err != nil {
		return "", dockerError("commit the template's image", err)
	}
	return cr.ID, nil
}

// removeBuildDebris removes build containers a killed sandboxd left.
func (m *Manager) removeBuildDebris(ctx context.Context) {
	list, err := m.docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", labelTemplateBuild), filters.Arg("label", labels.StateDir+"="+m.cfg.StateDir))})
	if err != nil {
		m.log.Warn("template builds: list leftover containers", "error", err)
		return
	}
	for _, c := range list {
		if err := m.docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !isDockerNotFound(err) {
			m.log.Warn("template builds: remove a leftover container", "container_id", c.ID, "error", err)
		}
	}
}

// buildNet is the network of a build's steps: none, or a namespace of the
// egress gateway's under the build's policy.
type buildNet struct {
	m  *Manager
	sb *sandbox // the namespace's holder, as a sandbox's; nil: no network
}

func (n *buildNet) apply(host *container.HostConfig) {
	if n.sb == nil {
		return
	}
	host.NetworkMode = container.NetworkMode("container:" + n.sb.net.Holder)
}

func (n *buildNet) close() {
	if n.sb == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), containerRemoveTimeout)
	defer cancel()
	n.m.removeNet(ctx, n.sb)
	os.RemoveAll(n.sb.dir)
}

// buildNetwork gives a build the egress gateway's network, allowing only
// the hosts of Config.TemplateBuildAllow (default: those of the host's
// apt sources), when the server has networking; else none, and a step
// that needs the network fails saying so in its log.
func (m *Manager) buildNetwork(ctx context.Context, emit func(string)) (*buildNet, error) {
	if !m.cfg.AllowNetwork {
		emit("[sandboxd] this build has no network (the server runs without --allow-network): apt and downloads will fail")
		return &buildNet{}, nil
	}
	allow := m.cfg.TemplateBuildAllow
	if len(allow) == 0 {
		allow = aptHosts("/etc/apt")
	}
	if len(allow) == 0 {
		emit("[sandboxd] this build has no network: no Debian mirror found in the host's apt sources, and --template-build-allow is empty")
		return &buildNet{}, nil
	}
	id := core.NewSandboxID()
	dir := filepath.Join(m.cfg.StateDir, templatesDir, ".net-"+id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	pol := core.NetworkPolicy{AllowOut: allow, DenyOut: []string{"0.0.0.0/0", "::/0"}}
	sb := newSandbox(dir, meta{ID: id, Image: m.cfg.Image, CreatedAt: time.Now().UTC(), Network: true, NetworkPolicy: policyToMeta(&pol)})
	n := &buildNet{m: m, sb: sb}
	if err := m.prepareNet(sb); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("the build's network: %w", err)
	}
	if err := m.upNet(ctx, sb); err != nil {
		n.close()
		return nil, fmt.Errorf("the build's network: %w", err)
	}
	emit("[sandboxd] this build's network reaches only: " + strings.Join(allow, ", "))
	return n, nil
}

// aptHosts returns the host names of the http(s) URIs of the apt sources
// under dir (one-line .list files and deb822 .sources files): the mirrors
// a build's apt steps need.
func aptHosts(dir string) []string {
	var files []string
	files = append(files, filepath.Join(dir, "sources.list"))
	for _, pat := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(dir, "sources.list.d", pat))
		files = append(files, m...)
	}
	var hosts []string
	for _, f := range files {
		b, err := readFileBounded(f, 1<<20)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "#") {
				continue
			}
			for _, field := range strings.Fields(line) {
				for _, scheme := range []string{"http://", "https://"} {
					if rest, ok := strings.CutPrefix(field, scheme); ok {
						h, _, _ := strings.Cut(rest, "/")
						h, _, _ = strings.Cut(h, ":")
						if h != "" && !slices.Contains(hosts, h) {
							hosts = append(hosts, h)
						}
					}
				}
			}
		}
	}
	return hosts
}
