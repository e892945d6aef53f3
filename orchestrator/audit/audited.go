package audit

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Recorder takes audit records. Record must not block for long: it is
// called on the caller's path, after each audited call (Log.Record queues).
type Recorder interface {
	Record(Event)
}

// Audited returns m with every mutating call recorded once to r, with the
// caller (core.CallerOf), its outcome and its duration. sandboxd puts it
// in front of core.Validating, so a request the domain's rules refuse is
// recorded too (outcome invalid_argument): an audit trail shows attempts,
// not only successes.
//
// Recorded, one action each: Acquire, Delete, SetTimeout, Hibernate, Wake,
// CreateSnapshot, DeleteSnapshot, Fork, UpdateNetworkPolicy, Submit and Execute (execute), Interrupt, CreateContext,
// RestartContext, DeleteContext, Upload (write_file), MakeDirectory
// (mkdir), Remove and Rename (move), CreateVolume, DeleteVolume,
// VolumeUpload (volume_write_file), VolumeMakeDirectory (volume_mkdir),
// VolumeRemove (volume_remove), VolumeSetAttributes
// (volume_set_attributes), PutTemplateFile (upload_template_file),
// BuildTemplate and DeleteTemplate. Not recorded: the reads (Get, List,
// ListSnapshots, NetworkStatus, SandboxMetrics, GetHost, PortTarget, Follow,
// ListCommands, ListContexts, Download, ListFiles, ListFilesDepth,
// WatchDirectory, GetVolume, ListVolumes, VolumeDownload, VolumeStat,
// VolumeListFiles, HasTemplateFile, FollowTemplateBuild, TemplateBuildLog,
// GetTemplate, ListTemplates), and the traffic of
// a command already recorded by its execute (SendStdin, CloseStdin,
// ResizePty): a terminal sends a call per keystroke and per resize, which
// would drown the trail without saying more than "execute" did.
//
// Nothing secret is recorded: of a command its ID, language and code
// size; of an upload its path and size; of a network policy nothing but
// the call; of Acquire the user, never the options' environment.
func Audited(m core.Manager, r Recorder) core.Manager {
	a := &auditor{r: r}
	p := core.PartsOf(m)
	return core.Parts{
		Sandboxes:  auditedSandboxes{p.Sandboxes, a},
		Commands:   auditedCommands{p.Commands, a},
		Files:      auditedFiles{p.Files, a},
		Network:    auditedNetwork{p.Network, a},
		Snapshots:  auditedSnapshots{p.Snapshots, a},
		Volumes:    auditedVolumes{p.Volumes, a},
		Templates:  auditedTemplates{p.Templates, a},
		Monitoring: p.Monitoring, // reads only
	}
}

// auditor records; Audited's wrappers share it.
type auditor struct {
	r Recorder
}

// Audited's wrapper of each capability with a mutating call. Each embeds
// its port, so the calls it does not record pass through unchanged;
// TestEveryMethodClassified keeps that list honest.
type (
	auditedSandboxes struct {
		core.Sandboxes
		*auditor
	}
	auditedCommands struct {
		core.Commands
		*auditor
	}
	auditedFiles struct {
		core.Files
		*auditor
	}
	auditedNetwork struct {
		core.Network
		*auditor
	}
	auditedSnapshots struct {
		core.Snapshots
		*auditor
	}
	auditedVolumes struct {
		core.Volumes
		*auditor
	}
	auditedTemplates struct {
		core.Templates
		*auditor
	}
)

// record records a call of action that began at start and ended with err;
// e carries the call's own details.
func (a *auditor) record(ctx context.Context, start time.Time, action string, e Event, err error) {
	c := core.CallerOf(ctx)
	e.Time = start
	e.Duration = time.Since(start)
	e.Tenant, e.TokenName, e.Admin = c.Tenant, c.Name, c.Admin
	e.Action = action
	e.Outcome = Outcome(err)
	if err != nil {
		e.Message = err.Error()
	}
	a.r.Record(e.bounded())
}

func (a auditedSandboxes) Acquire(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error) {
	start := time.Now()
	res, err := a.Sandboxes.Acquire(ctx, userID, opts)
	var vols []string
	for _, vm := range opts.Volumes {
		vols = append(vols, vm.Volume)
	}
	a.record(ctx, start, ActionAcquire, Event{SandboxID: res.Sandbox.ID, UserID: userID, Snapshot: opts.FromSnapshot, Volume: strings.Join(vols, ","), Template: opts.Template}, err)
	return res, err
}

func (a auditedSandboxes) Delete(ctx context.Context, sandboxID string) error {
	start := time.Now()
	err := a.Sandboxes.Delete(ctx, sandboxID)
	a.record(ctx, start, ActionDelete, Event{SandboxID: sandboxID}, err)
	return err
}

func (a auditedSandboxes) SetTimeout(ctx context.Context, sandboxID string, d time.Duration) (core.Sandbox, error) {
	start := time.Now()
	sb, err := a.Sandboxes.SetTimeout(ctx, sandboxID, d)
	a.record(ctx, start, ActionSetTimeout, Event{SandboxID: sandboxID}, err)
	return sb, err
}

func (a auditedSandboxes) Hibernate(ctx context.Context, sandboxID string) (core.Sandbox, error) {
	start := time.Now()
	sb, err := a.Sandboxes.Hibernate(ctx, sandboxID)
	a.record(ctx, start, ActionHibernate, Event{SandboxID: sandboxID}, err)
	return sb, err
}

func (a auditedSandboxes) Wake(ctx context.Context, sandboxID string) (core.Sandbox, *core.WakeInfo, error) {
	start := time.Now()
	sb, wi, err := a.Sandboxes.Wake(ctx, sandboxID)
	a.record(ctx, start, ActionWake, Event{SandboxID: sandboxID}, err)
	return sb, wi, err
}

func (a auditedSnapshots) CreateSnapshot(ctx context.Context, sandboxID, name string) (core.Snapshot, error) {
	start := time.Now()
	s, err := a.Snapshots.CreateSnapshot(ctx, sandboxID, name)
	ref := s.ID
	if ref == "" {
		ref = name
	}
	a.record(ctx, start, ActionCreateSnapshot, Event{SandboxID: sandboxID, Snapshot: ref}, err)
	return s, err
}

func (a auditedSnapshots) DeleteSnapshot(ctx context.Context, ref string) error {
	start := time.Now()
	err := a.Snapshots.DeleteSnapshot(ctx, ref)
	a.record(ctx, start, ActionDeleteSnapshot, Event{Snapshot: ref}, err)
	return err
}

func (a auditedSnapshots) Fork(ctx context.Context, sandboxID string, req core.ForkRequest) ([]core.ForkResult, error) {
	start := time.Now()
	rs, err := a.Snapshots.Fork(ctx, sandboxID, req)
	a.record(ctx, start, ActionFork, Event{SandboxID: sandboxID, Count: req.Count}, err)
	return rs, err
}

func (a auditedNetwork) UpdateNetworkPolicy(ctx context.Context, sandboxID string, p core.NetworkPolicy) (core.Sandbox, error) {
	start := time.Now()
	sb, err := a.Network.UpdateNetworkPolicy(ctx, sandboxID, p)
	a.record(ctx, start, ActionUpdateNetworkPolicy, Event{SandboxID: sandboxID}, err)
	return sb, err
}

// Submit is recorded when the command is queued (or refused), not when it
// ends: its ID leads to its outcome (ListCommands, StreamCommand).
func (a auditedCommands) Submit(ctx context.Context, req core.ExecRequest) (string, error) {
	start := time.Now()
	id, err := a.Commands.Submit(ctx, req)
	if id == "" {
		id = req.CommandID
	}
	a.record(ctx, start, ActionExecute, Event{SandboxID: req.SandboxID, CommandID: id, ContextID: req.ContextID,
		Language: req.Language, Bytes: int64(len(req.Code))}, err)
	return id, err
}

// Execute is recorded as Submit is: when the command is queued (or
// refused), under the same action.
func (a auditedCommands) Execute(ctx context.Context, req core.ExecRequest, submitted func(string), fn func(core.Event) error) error {
	start := time.Now()
	ev := Event{SandboxID: req.SandboxID, CommandID: req.CommandID, ContextID: req.ContextID,
		Language: req.Language, Bytes: int64(len(req.Code))}
	queued := false // submitted is called on Execute's goroutine, before it returns
	err := a.Commands.Execute(ctx, req, func(id string) {
		queued = true
		ev.CommandID = id
		a.record(ctx, start, ActionExecute, ev, nil)
		submitted(id)
	}, fn)
	if !queued {
		a.record(ctx, start, ActionExecute, ev, err)
	}
	return err
}

func (a auditedCommands) Interrupt(ctx context.Context, sandboxID, commandID string) error {
	start := time.Now()
	err := a.Commands.Interrupt(ctx, sandboxID, commandID)
	a.record(ctx, start, ActionInterrupt, Event{SandboxID: sandboxID, CommandID: commandID}, err)
	return err
}

func (a auditedCommands) CreateContext(ctx context.Context, sandboxID, language, cwd string) (core.ContextInfo, error) {
	start := time.Now()
	ci, err := a.Commands.CreateContext(ctx, sandboxID, language, cwd)
	a.record(ctx, start, ActionCreateContext, Event{SandboxID: sandboxID, ContextID: ci.ID, Language: language, Path: cwd}, err)
	return ci, err
}

func (a auditedCommands) RestartContext(ctx context.Context, sandboxID, contextID string) error {
	start := time.Now()
	err := a.Commands.RestartContext(ctx, sandboxID, contextID)
	a.record(ctx, start, ActionRestartContext, Event{SandboxID: sandboxID, ContextID: contextID}, err)
	return err
}

func (a auditedCommands) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	start := time.Now()
	err := a.Commands.DeleteContext(ctx, sandboxID, contextID)
	a.record(ctx, start, ActionDeleteContext, Event{SandboxID: sandboxID, ContextID: contextID}, err)
	return err
}

// Upload records the bytes the backend read of the upload, not their
// content.
func (a auditedFiles) Upload(ctx context.Context, sandboxID, path string, r io.Reader) (core.FileInfo, error) {
	start := time.Now()
	cr := &countingReader{r: r}
	fi, err := a.Files.Upload(ctx, sandboxID, path, cr)
	a.record(ctx, start, ActionWriteFile, Event{SandboxID: sandboxID, Path: path, Bytes: cr.n.Load()}, err)
	return fi, err
}

func (a auditedFiles) MakeDirectory(ctx context.Context, sandboxID, path string, parents bool) (core.FileInfo, error) {
	start := time.Now()
	fi, err := a.Files.MakeDirectory(ctx, sandboxID, path, parents)
	a.record(ctx, start, ActionMkdir, Event{SandboxID: sandboxID, Path: path}, err)
	return fi, err
}

func (a auditedFiles) Remove(ctx context.Context, sandboxID, path string, recursive bool) error {
	start := time.Now()
	err := a.Files.Remove(ctx, sandboxID, path, recursive)
	a.record(ctx, start, ActionRemove, Event{SandboxID: sandboxID, Path: path}, err)
	return err
}

func (a auditedFiles) Rename(ctx context.Context, sandboxID, from, to string, overwrite bool) (core.FileInfo, error) {
	start := time.Now()
	fi, err := a.Files.Rename(ctx, sandboxID, from, to, overwrite)
	a.record(ctx, start, ActionMove, Event{SandboxID: sandboxID, Path: from, ToPath: to}, err)
	return fi, err
}

// countingReader counts the bytes read through it. Atomic: a backend may
// read the upload on another goroutine than the one that returns.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (a auditedVolumes) CreateVolume(ctx context.Context, name string, size int64) (core.Volume, error) {
	start := time.Now()
	v, err := a.Volumes.CreateVolume(ctx, name, size)
	ref := v.ID
	if ref == "" {
		ref = name
	}
	a.record(ctx, start, ActionCreateVolume, Event{Volume: ref, Bytes: size}, err)
	return v, err
}

func (a auditedVolumes) DeleteVolume(ctx context.Context, ref string, force bool) error {
	start := time.Now()
	err := a.Volumes.DeleteVolume(ctx, ref, force)
	a.record(ctx, start, ActionDeleteVolume, Event{Volume: ref}, err)
	return err
}

func (a auditedVolumes) VolumeUpload(ctx context.Context, ref, path string, r io.Reader, overwrite bool) (core.FileInfo, error) {
	start := time.Now()
	cr := &countingReader{r: r}
	fi, err := a.Volumes.VolumeUpload(ctx, ref, path, cr, overwrite)
	a.record(ctx, start, ActionVolumeWriteFile, Event{Volume: ref, Path: path, Bytes: cr.n.Load()}, err)
	return fi, err
}

func (a auditedVolumes) VolumeMakeDirectory(ctx context.Context, ref, path string, parents bool) (core.FileInfo, error) {
	start := time.Now()
	fi, err := a.Volumes.VolumeMakeDirectory(ctx, ref, path, parents)
	a.record(ctx, start, ActionVolumeMkdir, Event{Volume: ref, Path: path}, err)
	return fi, err
}

func (a auditedVolumes) VolumeRemove(ctx context.Context, ref, path string, recursive bool) error {
	start := time.Now()
	err := a.Volumes.VolumeRemove(ctx, ref, path, recursive)
	a.record(ctx, start, ActionVolumeRemove, Event{Volume: ref, Path: path}, err)
	return err
}

func (a auditedVolumes) VolumeSetAttributes(ctx context.Context, ref, path string, at core.FileAttributes) (core.FileInfo, error) {
	start := time.Now()
	fi, err := a.Volumes.VolumeSetAttributes(ctx, ref, path, at)
	a.record(ctx, start, ActionVolumeSetAttributes, Event{Volume: ref, Path: path}, err)
	return fi, err
}

func (a auditedTemplates) PutTemplateFile(ctx context.Context, key string, r io.Reader) (bool, error) {
	start := time.Now()
	cr := &countingReader{r: r}
	existed, err := a.Templates.PutTemplateFile(ctx, key, cr)
	a.record(ctx, start, ActionUploadTemplateFile, Event{Template: key, Bytes: cr.n.Load()}, err)
	return existed, err
}

// BuildTemplate records the start of a build (its outcome is whether it
// started; how it ends is the template's version, not a call).
func (a auditedTemplates) BuildTemplate(ctx context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
	start := time.Now()
	t, v, err := a.Templates.BuildTemplate(ctx, name, spec, force)
	ref := t.ID
	if ref == "" {
		ref = name
	}
	a.record(ctx, start, ActionBuildTemplate, Event{Template: ref}, err)
	return t, v, err
}

func (a auditedTemplates) DeleteTemplate(ctx context.Context, ref string) error {
	start := time.Now()
	err := a.Templates.DeleteTemplate(ctx, ref)
	a.record(ctx, start, ActionDeleteTemplate, Event{Template: ref}, err)
	return err
}
