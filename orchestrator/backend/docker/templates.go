package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/labels"
)

// Templates on this backend (core/template.go says what they are).
//
// A template is a directory StateDir/templates/<id>/ holding template.json
// (its name, tenant and versions, each with its spec and, once ready, its
// image's ID) and one log per version (v<N>.log, JSON lines). Uploaded
// archives are StateDir/template-files/<tenant>/<key>, immutable. The
// images are Docker's, tagged sandboxd-template:<id>-v<N> so that no
// prune of dangling images takes them; the images of the steps (the
// build cache) are labelled with their cache key and untagged.
//
// A build (template_build.go) runs in the background: BuildTemplate
// returns once its version is recorded as building, and the caller follows
// the log. template.json is written before a build starts and when it
// ends, so a sandboxd killed mid-build finds the version building at start
// and marks it failed, keeping its log; its half-made containers carry the
// build label and are removed, and a retry builds again (the step images
// already committed are its cache). A version's image is removed once a
// newer version is ready and no sandbox (running or hibernated) uses it.
//
// The lock (templates.mu) is a leaf: nothing else is locked under it, and
// no Docker call is made while it is held.

const (
	templatesDir     = "templates"
	templateFilesDir = "template-files"
	templateMetaFile = "template.json"
	// templateImageRepo tags the templates' images.
	templateImageRepo = "sandboxd-template"
	// templateGCInterval is how often unused versions' images are looked
	// for besides the builds' and deletions' own passes.
	templateGCInterval = 10 * time.Minute
)

// templateEngine is the part of the Docker API the builder needs beyond
// DockerAPI; *client.Client has it. A Manager whose engine lacks it (the
// fake engine of unit tests) answers templates with Unsupported.
type templateEngine interface {
	ContainerCommit(ctx context.Context, containerID string, options container.CommitOptions) (container.CommitResponse, error)
	CopyToContainer(ctx context.Context, containerID, dstPath string, content io.Reader, options container.CopyToContainerOptions) error
	CopyFromContainer(ctx context.Context, containerID, srcPath string) (io.ReadCloser, container.PathStat, error)
	ContainerLogs(ctx context.Context, containerID string, options container.LogsOptions) (io.ReadCloser, error)
	ContainerWait(ctx context.Context, containerID string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerInspectWithRaw(ctx context.Context, containerID string, getSize bool) (container.InspectResponse, []byte, error)
	ImageList(ctx context.Context, options image.ListOptions) ([]image.Summary, error)
	ImageRemove(ctx context.Context, imageID string, options image.RemoveOptions) ([]image.DeleteResponse, error)
	ImageTag(ctx context.Context, source, target string) error
}

// tplMeta is template.json.
type tplMeta struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	Tenant    string       `json:"tenant"`
	CreatedAt time.Time    `json:"created_at"`
	Versions  []tplVersion `json:"versions"`
}

// tplVersion is one version of a template, as template.json keeps it.
type tplVersion struct {
	Version    int                `json:"version"`
	SpecHash   string             `json:"spec_hash"`
	Spec       core.TemplateSpec  `json:"spec"`
	BaseImage  string             `json:"base_image"`
	State      core.TemplateState `json:"state"`
	Reason     string             `json:"reason,omitempty"`
	Class      string             `json:"class,omitempty"` // the failure's error class
	Cached     bool               `json:"cached,omitempty"`
	StartedAt  time.Time          `json:"started_at"`
	FinishedAt time.Time          `json:"finished_at,omitzero"`
	Image      string             `json:"image,omitempty"` // its image's ID, once ready
	SizeBytes  int64              `json:"size_bytes,omitempty"`
}

// tplRun is a build in progress: its log so far, for followers.
type tplRun struct {
	mu     sync.Mutex
	events []core.TemplateBuildEvent
	bytes  int
	done   *core.TemplateVersion
	err    error
	notify chan struct{} // closed (and replaced) at each change
	cancel context.CancelFunc
}

// templates is the backend's store of templates.
type templates struct {
	dir, filesDir string
	log           *slog.Logger

	mu       sync.Mutex
	byID     map[string]*tplMeta
	runs     map[string]*tplRun // by template ID: its building version's
	building int
	// buildingBy counts the builds running by tenant.
	buildingBy map[string]int
}

// loadTemplates reads the templates under stateDir. A version found
// building was cut short by a crash: it is marked failed, its log kept.
func loadTemplates(stateDir string, log *slog.Logger) (*templates, error) {
	t := &templates{dir: filepath.Join(stateDir, templatesDir), filesDir: filepath.Join(stateDir, templateFilesDir),
		log: log, byID: map[string]*tplMeta{}, runs: map[string]*tplRun{}, buildingBy: map[string]int{}}
	for _, d := range []string{t.dir, t.filesDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	ents, err := os.ReadDir(t.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		dir := filepath.Join(t.dir, e.Name())
		b, err := readFileBounded(filepath.Join(dir, templateMetaFile), 16<<20)
		if err != nil || !core.IsTemplateID(e.Name()) {
			// Debris of a creation cut short (template.json is written
			// before anything else is done with a template).
			log.Warn("removing a template directory without a readable template.json", "dir", dir, "error", err)
			os.RemoveAll(dir)
			continue
		}
		var tm tplMeta
		if err := json.Unmarshal(b, &tm); err != nil || tm.ID != e.Name() {
			log.Error("template.json is unreadable; the template is left out", "dir", dir, "error", err)
			continue
		}
		changed := false
		for i := range tm.Versions {
			if v := &tm.Versions[i]; v.State == core.TemplateBuilding {
				v.State, v.Class, v.FinishedAt = core.TemplateFailed, core.ErrUnavailable.Error(), time.Now().UTC()
				v.Reason = "sandboxd stopped during the build; build again"
				changed = true
			}
		}
		if changed {
			if err := t.write(&tm); err != nil {
				return nil, err
			}
		}
		t.byID[tm.ID] = &tm
	}
	return t, nil
}

// readFileBounded reads a file of the host's state, refusing one past max.
func readFileBounded(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f, max, p)
}

// write persists tm (template.json, atomically). The caller holds t.mu or
// owns tm alone.
func (t *templates) write(tm *tplMeta) error {
	dir := filepath.Join(t.dir, tm.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(tm, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, templateMetaFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, templateMetaFile))
}

// find returns the template of tenant named or with ID ref (nil if none).
// The caller holds t.mu.
func (t *templates) find(tenant, ref string) *tplMeta {
	if core.IsTemplateID(ref) {
		if tm := t.byID[ref]; tm != nil && tm.Tenant == tenant {
			return tm
		}
		return nil
	}
	for _, tm := range t.byID {
		if tm.Tenant == tenant && tm.Name == ref {
			return tm
		}
	}
	return nil
}

// visible resolves ref for the caller: their tenant's, or (an admin) by
// ID any tenant's.
func (t *templates) visible(c core.Caller, ref string) *tplMeta {
	if tm := t.find(c.Tenant, ref); tm != nil {
		return tm
	}
	if c.Admin && core.IsTemplateID(ref) {
		return t.byID[ref]
	}
	return nil
}

func (t *templates) logPath(id string, version int) string {
	return filepath.Join(t.dir, id, fmt.Sprintf("v%d.log", version))
}

func (t *templates) filePath(tenant, key string) string {
	return filepath.Join(t.filesDir, tenant, key)
}

// current returns tm's latest ready version.
func (tm *tplMeta) current() (tplVersion, bool) {
	for i := len(tm.Versions) - 1; i >= 0; i-- {
		if tm.Versions[i].State == core.TemplateReady {
			return tm.Versions[i], true
		}
	}
	return tplVersion{}, false
}

func (tm *tplMeta) version(n int) (*tplVersion, bool) {
	for i := range tm.Versions {
		if tm.Versions[i].Version == n {
			return &tm.Versions[i], true
		}
	}
	return nil, false
}

func (v tplVersion) toCore(usedBy int) core.TemplateVersion {
	return core.TemplateVersion{Version: v.Version, SpecHash: v.SpecHash, State: v.State, Reason: v.Reason, Cached: v.Cached,
		StartedAt: v.StartedAt, FinishedAt: v.FinishedAt, SizeBytes: v.SizeBytes, UsedBy: usedBy}
}

// failure is the classed error of a failed version.
func (v tplVersion) failure(name string) error {
	class := core.ErrFailedPrecondition
	for _, c := range core.Classes() {
		if c.Error() == v.Class {
			class = c
		}
	}
	return core.Errorf(class, "template %s version %d failed: %s", name, v.Version, v.Reason)
}

// templateUse counts the sandboxes (running or hibernated, not dead) of
// each template version, keyed "<id>/<version>", and the images they run.
func (m *Manager) templateUse() (map[string]int, map[string]bool) {
	byVersion, images := map[string]int{}, map[string]bool{}
	for _, sb := range m.reg.all() {
		images[sb.image] = true
		if sb.template == "" {
			continue
		}
		if st, _ := sb.status(); st == core.StateDead {
			continue
		}
		byVersion[fmt.Sprintf("%s/%d", sb.template, sb.templateVersion)]++
	}
	if m.snaps != nil {
		m.snaps.mu.Lock()
		for _, f := range m.snaps.byID {
			if f.Image != "" {
				images[f.Image] = true
			}
		}
		m.snaps.mu.Unlock()
	}
	return byVersion, images
}

func (m *Manager) templateToCore(tm *tplMeta, use map[string]int) core.Template {
	out := core.Template{ID: tm.ID, Name: tm.Name, Tenant: tm.Tenant, CreatedAt: tm.CreatedAt}
	for _, v := range tm.Versions {
		out.Versions = append(out.Versions, v.toCore(use[fmt.Sprintf("%s/%d", tm.ID, v.Version)]))
	}
	return out
}

// templatesOn reports whether this server can build templates, and why not.
func (m *Manager) templatesOn() error {
	if m.tplEngine == nil || m.tpls == nil {
		return core.Unsupported("docker (this engine client)", "templates")
	}
	return nil
}

// PutTemplateFile stores an archive for the caller's tenant under key:
// written to a temporary file and renamed into place, so a key names a
// whole archive or nothing. An existing key is left as it is.
func (m *Manager) PutTemplateFile(ctx context.Context, key string, r io.Reader) (bool, error) {
	if err := m.templatesOn(); err != nil {
		return false, err
	}
	c := core.CallerOf(ctx)
	p := m.tpls.filePath(c.Tenant, key)
	if _, err := os.Stat(p); err == nil {
		return true, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".upload-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, ctxReader{ctx, r})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, err
	}
	// Link, not rename: a concurrent upload of the key may have won, and
	// the first archive stays (keys are immutable).
	if err := os.Link(f.Name(), p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return true, nil
		}
		return false, err
	}
	return false, nil
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// HasTemplateFile reports whether the caller's tenant has the archive.
func (m *Manager) HasTemplateFile(ctx context.Context, key string) (bool, error) {
	if err := m.templatesOn(); err != nil {
		return false, err
	}
	_, err := os.Stat(m.tpls.filePath(core.CallerOf(ctx).Tenant, key))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// GetTemplate returns a template the caller may see.
func (m *Manager) GetTemplate(ctx context.Context, ref string) (core.Template, error) {
	if err := m.templatesOn(); err != nil {
		return core.Template{}, err
	}
	use, _ := m.templateUse()
	m.tpls.mu.Lock()
	defer m.tpls.mu.Unlock()
	tm := m.tpls.visible(core.CallerOf(ctx), ref)
	if tm == nil {
		return core.Template{}, core.TemplateNotFound(ref)
	}
	return m.templateToCore(tm, use), nil
}

// ListTemplates lists the templates the caller may see, by tenant and name.
func (m *Manager) ListTemplates(ctx context.Context, tenant string) ([]core.Template, error) {
	if err := m.templatesOn(); err != nil {
		return nil, err
	}
	c := core.CallerOf(ctx)
	if !c.Admin {
		tenant = c.Tenant
	}
	use, _ := m.templateUse()
	m.tpls.mu.Lock()
	var out []core.Template
	for _, tm := range m.tpls.byID {
		if tenant == "" || tm.Tenant == tenant {
			out = append(out, m.templateToCore(tm, use))
		}
	}
	m.tpls.mu.Unlock()
	slices.SortFunc(out, func(a, b core.Template) int {
		return strings.Compare(a.Tenant+"\x00"+a.Name, b.Tenant+"\x00"+b.Name)
	})
	return out, nil
}

// DeleteTemplate deletes a template: gone for new sandboxes at once, its
// running build cancelled, its images removed once unused (gcTemplates).
func (m *Manager) DeleteTemplate(ctx context.Context, ref string) error {
	if err := m.templatesOn(); err != nil {
		return err
	}
	m.tpls.mu.Lock()
	tm := m.tpls.visible(core.CallerOf(ctx), ref)
	if tm == nil {
		m.tpls.mu.Unlock()
		return core.TemplateNotFound(ref)
	}
	delete(m.tpls.byID, tm.ID)
	run := m.tpls.runs[tm.ID]
	m.tpls.mu.Unlock()
	if run != nil {
		run.cancel()
	}
	// The images go by their tags' template ID (gcTemplates); the
	// directory now.
	if err := os.RemoveAll(filepath.Join(m.tpls.dir, tm.ID)); err != nil {
		return err
	}
	m.log.Info("template deleted", "template_id", tm.ID, "tenant", tm.Tenant, "name", tm.Name)
	go m.gcTemplates(context.WithoutCancel(ctx))
	return nil
}

// resolveTemplate finds the image a new sandbox of the caller gets for
// Options.Template: the template's latest ready version.
func (m *Manager) resolveTemplate(c core.Caller, ref string) (id string, version int, img string, err error) {
	if err := m.templatesOn(); err != nil {
		return "", 0, "", err
	}
	m.tpls.mu.Lock()
	defer m.tpls.mu.Unlock()
	tm := m.tpls.find(c.Tenant, ref)
	if tm == nil {
		return "", 0, "", core.TemplateNotFound(ref)
	}
	v, ok := tm.current()
	if !ok {
		why := "it has no version yet"
		if l := len(tm.Versions); l > 0 {
			switch last := tm.Versions[l-1]; last.State {
			case core.TemplateBuilding:
				why = fmt.Sprintf("its first build (version %d) is running", last.Version)
			case core.TemplateFailed:
				why = fmt.Sprintf("its build (version %d) failed: %s", last.Version, last.Reason)
			}
		}
		return "", 0, "", core.Preconditionf("template %s has no ready version: %s", tm.Name, why)
	}
	return tm.ID, v.Version, v.Image, nil
}

// versionOf finds a version of a template the caller may see (*version
// 0: the latest, and *version is set to it), with its build in progress
// (nil once it is not building).
func (t *templates) versionOf(c core.Caller, ref string, version *int) (id, name string, v tplVersion, run *tplRun, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tm := t.visible(c, ref)
	if tm == nil {
		return "", "", tplVersion{}, nil, core.TemplateNotFound(ref)
	}
	if *version == 0 && len(tm.Versions) > 0 {
		*version = tm.Versions[len(tm.Versions)-1].Version
	}
	p, ok := tm.version(*version)
	if !ok {
		return "", "", tplVersion{}, nil, core.NotFoundf("template %s has no version %d", tm.Name, *version)
	}
	if p.State == core.TemplateBuilding {
		run = t.runs[tm.ID]
	}
	return tm.ID, tm.Name, *p, run, nil
}

// FollowTemplateBuild calls fn with a version's log after afterSeq and
// then its end, waiting while it builds.
func (m *Manager) FollowTemplateBuild(ctx context.Context, ref string, version int, afterSeq int64, fn func(core.TemplateBuildEvent) error) error {
	if err := m.templatesOn(); err != nil {
		return err
	}
	id, name, ver, run, err := m.tpls.versionOf(core.CallerOf(ctx), ref, &version)
	if err != nil {
		return err
	}

	if run == nil {
		evs, err := readTemplateLog(m.tpls.logPath(id, version), afterSeq, -1)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if err := fn(ev); err != nil {
				return err
			}
		}
		done := ver.toCore(0)
		if err := fn(core.TemplateBuildEvent{Time: ver.FinishedAt, Done: &done}); err != nil {
			return err
		}
		if ver.State == core.TemplateFailed {
			return ver.failure(name)
		}
		return nil
	}
	for {
		run.mu.Lock()
		var next []core.TemplateBuildEvent
		for _, ev := range run.events {
			if ev.Seq > afterSeq {
				next = append(next, ev)
			}
		}
		done, runErr, notify := run.done, run.err, run.notify
		run.mu.Unlock()
		for _, ev := range next {
			if err := fn(ev); err != nil {
				return err
			}
			afterSeq = ev.Seq
		}
		if done != nil {
			if err := fn(core.TemplateBuildEvent{Time: done.FinishedAt, Done: done}); err != nil {
				return err
			}
			return runErr
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TemplateBuildLog returns up to limit lines after afterSeq and the
// version as it stands.
func (m *Manager) TemplateBuildLog(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]core.TemplateBuildEvent, core.TemplateVersion, error) {
	if err := m.templatesOn(); err != nil {
		return nil, core.TemplateVersion{}, err
	}
	id, _, ver, run, err := m.tpls.versionOf(core.CallerOf(ctx), ref, &version)
	if err != nil {
		return nil, core.TemplateVersion{}, err
	}
	if run != nil {
		run.mu.Lock()
		defer run.mu.Unlock()
		var out []core.TemplateBuildEvent
		for _, ev := range run.events {
			if ev.Seq > afterSeq && len(out) < limit {
				out = append(out, ev)
			}
		}
		if run.done != nil && len(out) < limit {
			return out, *run.done, nil
		}
		return out, ver.toCore(0), nil
	}
	evs, err := readTemplateLog(m.tpls.logPath(id, version), afterSeq, limit)
	if err != nil {
		return nil, core.TemplateVersion{}, err
	}
	return evs, ver.toCore(0), nil
}

// readTemplateLog reads a finished build's log: up to limit (all if < 0)
// lines after afterSeq. The file is the host's own (lines written by
// sandboxd, each bounded), read bounded all the same.
func readTemplateLog(p string, afterSeq int64, limit int) ([]core.TemplateBuildEvent, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []core.TemplateBuildEvent
	sc := bufio.NewScanner(io.LimitReader(f, core.MaxTemplateLogBytes*4))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		var ev core.TemplateBuildEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Seq <= afterSeq {
			continue
		}
		out = append(out, ev)
		if limit >= 0 && len(out) >= limit {
			break
		}
	}
	return out, sc.Err()
}

// gcTemplates removes the images of template versions nothing needs: of
// deleted templates, and of versions older than their template's current
// one, unless a sandbox (running or hibernated) runs them. Their versions
// leave template.json with them, except the last failed one after the
// current (its log says why the newest build failed).
func (m *Manager) gcTemplates(ctx context.Context) {
	if m.templatesOn() != nil {
		return
	}
	// This sandboxd's images only: another one on the engine (another
	// state directory) keeps its own.
	imgs, err := m.tplEngine.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", labels.StateDir+"="+m.cfg.StateDir))})
	if err != nil {
		m.log.Warn("template images: list", "error", err)
		return
	}
	_, inUse := m.templateUse()
	keep := map[string]bool{}
	m.tpls.mu.Lock()
	for _, tm := range m.tpls.byID {
		cur, _ := tm.current()
		var kept []tplVersion
		for i, v := range tm.Versions {
			newer := i == len(tm.Versions)-1 || v.Version >= cur.Version
			switch {
			case v.State == core.TemplateBuilding, v.Version == cur.Version, inUse[v.Image] && v.Image != "":
				kept = append(kept, v)
			case v.State == core.TemplateFailed && newer:
				kept = append(kept, v)
			default:
				os.Remove(m.tpls.logPath(tm.ID, v.Version))
				continue
			}
			if v.Image != "" {
				keep[v.Image] = true
			}
		}
		if len(kept) != len(tm.Versions) {
			tm.Versions = kept
			if err := m.tpls.write(tm); err != nil {
				m.log.Error("template images: write template.json", "template_id", tm.ID, "error", err)
			}
		}
	}
	m.tpls.mu.Unlock()
	for _, img := range imgs {
		var tags []string
		for _, t := range img.RepoTags {
			if strings.HasPrefix(t, templateImageRepo+":") {
				tags = append(tags, t)
			}
		}
		if len(tags) == 0 || keep[img.ID] || inUse[img.ID] {
			continue
		}
		for _, t := range tags {
			if _, err := m.tplEngine.ImageRemove(ctx, t, image.RemoveOptions{}); err != nil && !isDockerNotFound(err) {
				m.log.Warn("template images: remove", "tag", t, "error", err)
			}
		}
	}
}

// templateGCLoop runs gcTemplates now and then until the Manager closes.
func (m *Manager) templateGCLoop(ctx context.Context) {
	t := time.NewTicker(templateGCInterval)
	defer t.Stop()
	for {
		m.gcTemplates(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
