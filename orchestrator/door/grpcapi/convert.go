package grpcapi

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/ioproto"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// This file holds every conversion between domain and proto types, so the
// mapping of the public contract is reviewed in one place.
//
// Proto3 string fields must be valid UTF-8: a message with an invalid one
// fails to marshal, and gRPC then ends the call or stream with INTERNAL. Many
// strings come from the sandbox, which can write any bytes (file names in
// /workspace, events files and artifacts in /io, which hostile code can
// rewrite, Docker's account of its death). The domain keeps them as they are
// (a Go caller may need the real bytes of a file name); every such string is
// made valid here, where it enters a proto, with validUTF8, validUTF8s or
// mimeBundleToProto. Strings the server itself chose or validated (IDs,
// tenants, the image, the language of a request) need not be.

// validUTF8 returns s with each run of invalid UTF-8 bytes replaced by
// U+FFFD (as Go's json and the driver's output cleaning do). Valid strings,
// nearly all of them, are returned as they are, without allocating.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// validUTF8s is validUTF8 on each element; it copies the slice only when an
// element changes.
func validUTF8s(ss []string) []string {
	for i, s := range ss {
		if utf8.ValidString(s) {
			continue
		}
		out := slices.Clone(ss)
		for j := i; j < len(out); j++ {
			out[j] = validUTF8(out[j])
		}
		return out
	}
	return ss
}

// mimeBundleToProto makes a MIME bundle (Display.data, Result.data) valid
// for the wire. Values are made valid like any string (base64 values of
// binary types are ASCII and pass unchanged). Keys are MIME types and nearly
// always ASCII; an invalid key is made valid too, but two keys can then
// collide ("text/\xff" and "text/\xfe" both become "text/\uFFFD", or one can
// become a valid key already present). Rather than silently dropping a value,
// a key that collides gets the suffix "#2", "#3", ... (the first free one):
// valid keys keep their name, and the invalid ones are placed in the order
// of their raw bytes, so the result is deterministic and holds exactly as
// many entries as the input. The bundle is returned as it is when it is
// valid, the common case.
func mimeBundleToProto(data map[string]string) map[string]string {
	clean := true
	for k, v := range data {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			clean = false
			break
		}
	}
	if clean {
		return data
	}
	out := make(map[string]string, len(data))
	var invalidKeys []string
	for k, v := range data {
		if !utf8.ValidString(k) {
			invalidKeys = append(invalidKeys, k)
			continue
		}
		out[k] = validUTF8(v)
	}
	slices.Sort(invalidKeys)
	for _, k := range invalidKeys {
		key := validUTF8(k)
		for n := 2; ; n++ {
			if _, taken := out[key]; !taken {
				break
			}
			key = validUTF8(k) + "#" + strconv.Itoa(n)
		}
		out[key] = validUTF8(data[k])
	}
	return out
}

// timestampToProto leaves unset times (zero) unset on the wire instead of
// sending 0001-01-01, which clients would show as a real date.
func timestampToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func limitsToProto(l core.Limits) *sandboxv1.ResourceLimits {
	return &sandboxv1.ResourceLimits{
		MemoryBytes: l.MemoryBytes,
		NanoCpus:    l.NanoCPUs,
		PidsLimit:   l.PidsLimit,
		DiskBytes:   l.DiskBytes,
	}
}

// limitsFromProto treats an absent message as all zeros: the server defaults.
func limitsFromProto(l *sandboxv1.ResourceLimits) core.Limits {
	return core.Limits{
		MemoryBytes: l.GetMemoryBytes(),
		NanoCPUs:    l.GetNanoCpus(),
		PidsLimit:   l.GetPidsLimit(),
		DiskBytes:   l.GetDiskBytes(),
	}
}

func stateToProto(s core.State) sandboxv1.SandboxState {
	switch s {
	case core.StateRunning:
		return sandboxv1.SandboxState_SANDBOX_STATE_RUNNING
	case core.StateDead:
		return sandboxv1.SandboxState_SANDBOX_STATE_DEAD
	case core.StateHibernated:
		return sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED
	}
	return sandboxv1.SandboxState_SANDBOX_STATE_UNSPECIFIED
}

// stateFromProto maps a filter state; UNSPECIFIED is "any" (empty). Values
// this server does not know are an error rather than "any", so a newer
// client's filter is never silently widened.
func stateFromProto(s sandboxv1.SandboxState) (core.State, error) {
	switch s {
	case sandboxv1.SandboxState_SANDBOX_STATE_UNSPECIFIED:
		return "", nil
	case sandboxv1.SandboxState_SANDBOX_STATE_RUNNING:
		return core.StateRunning, nil
	case sandboxv1.SandboxState_SANDBOX_STATE_DEAD:
		return core.StateDead, nil
	case sandboxv1.SandboxState_SANDBOX_STATE_HIBERNATED:
		return core.StateHibernated, nil
	}
	return "", fmt.Errorf("unknown sandbox state %d", int32(s))
}

func sandboxToProto(s core.Sandbox) *sandboxv1.Sandbox {
	return &sandboxv1.Sandbox{
		SandboxId:       s.ID,
		UserId:          s.UserID,
		State:           stateToProto(s.State),
		StateReason:     validUTF8(s.StateReason),
		HealthReason:    validUTF8(s.HealthReason),
		CreatedAt:       timestampToProto(s.CreatedAt),
		LastActiveAt:    timestampToProto(s.LastActiveAt),
		ExpiresAt:       timestampToProto(s.ExpiresAt),
		Image:           s.Image,
		Limits:          limitsToProto(s.Limits),
		Tenant:          s.Tenant,
		Network:         s.Network,
		NetworkPolicy:   policyToProto(s.NetworkPolicy),
		Metadata:        metadataToProto(s.Metadata),
		IdleTimeout:     idleTimeoutToProto(s.IdleTimeout),
		Snapshot:        snapshotToProto(s.Snapshot),
		HibernatedAt:    timestampToProto(s.HibernatedAt),
		LastWake:        wakeToProto(s.LastWake),
		OnIdle:          idleActionToProto(s.OnIdle),
		Volumes:         volumeMountsToProto(s.Volumes),
		Template:        validUTF8(s.Template),
		TemplateVersion: int32(s.TemplateVersion),
	}
}

// volumeToProto converts a volume. Its name and tenant were validated
// when it was made; they are made valid UTF-8 all the same, as a
// snapshot's are. MountedBy are sandbox IDs the server chose.
func volumeToProto(v core.Volume) *sandboxv1.Volume {
	return &sandboxv1.Volume{
		Id:        v.ID,
		Name:      validUTF8(v.Name),
		Tenant:    validUTF8(v.Tenant),
		SizeBytes: v.SizeBytes,
		UsedBytes: v.UsedBytes,
		CreatedAt: timestampToProto(v.CreatedAt),
		MountedBy: v.MountedBy,
	}
}

// volumeMountsToProto converts a sandbox's mounts (nil without).
func volumeMountsToProto(ms []core.VolumeMount) []*sandboxv1.VolumeMount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]*sandboxv1.VolumeMount, 0, len(ms))
	for _, m := range ms {
		out = append(out, &sandboxv1.VolumeMount{Volume: validUTF8(m.Volume), MountPath: validUTF8(m.Path), ReadOnly: m.ReadOnly})
	}
	return out
}

// volumeMountsFromProto converts requested mounts; the domain checks them
// (core.ValidateVolumeMounts). nil without.
func volumeMountsFromProto(ms []*sandboxv1.VolumeMount) []core.VolumeMount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]core.VolumeMount, 0, len(ms))
	for _, m := range ms {
		out = append(out, core.VolumeMount{Volume: m.GetVolume(), Path: m.GetMountPath(), ReadOnly: m.GetReadOnly()})
	}
	return out
}

// volumeFileToProto converts a file on a volume, whose name a sandbox may
// have written (fileInfoToProto makes it valid UTF-8). Its path is
// relative to the volume's root, the root itself being "" on the wire as
// /workspace is in FileInfo.
func volumeFileToProto(f core.FileInfo) *sandboxv1.FileInfo {
	if f.Path == "." {
		f.Path = ""
	}
	return fileInfoToProto(f)
}

// volumeFilesToProto is filesToProto for a volume's files.
func volumeFilesToProto(files []core.FileInfo) []*sandboxv1.FileInfo {
	for i, f := range files {
		if f.Path == "." {
			files = slices.Clone(files)
			files[i].Path = ""
		}
	}
	return filesToProto(files)
}

// idleActionToProto converts the domain's on-idle action.
func idleActionToProto(a string) sandboxv1.IdleAction {
	switch a {
	case core.OnIdleHibernate:
		return sandboxv1.IdleAction_IDLE_ACTION_HIBERNATE
	case core.OnIdleDelete:
		return sandboxv1.IdleAction_IDLE_ACTION_DELETE
	}
	return sandboxv1.IdleAction_IDLE_ACTION_UNSPECIFIED
}

func snapshotToProto(s *core.SnapshotInfo) *sandboxv1.SnapshotInfo {
	if s == nil {
		return nil
	}
	return &sandboxv1.SnapshotInfo{Level: s.Level, SizeBytes: s.Bytes, TakenAt: timestampToProto(s.TakenAt), Reason: validUTF8(s.Reason)}
}

// wakeToProto converts a wake's outcome. Names come from the sandbox:
// the domain bounded them (ioproto.HibResult.Sanitized); they are made
// valid UTF-8 here again, as all sandbox text is.
func wakeToProto(w *core.WakeInfo) *sandboxv1.WakeInfo {
	if w == nil {
		return nil
	}
	p := &sandboxv1.WakeInfo{Level: validUTF8(w.Level), RestoredNames: validUTF8s(w.Restored), Reason: validUTF8(w.Reason), Time: timestampToProto(w.Time)}
	for _, l := range w.Lost {
		p.Lost = append(p.Lost, &sandboxv1.LostName{Name: validUTF8(l.Name), Reason: validUTF8(l.Why)})
	}
	return p
}

func acquireResultToProto(r core.AcquireResult) *sandboxv1.AcquireSandboxResponse {
	return &sandboxv1.AcquireSandboxResponse{
		Sandbox:           sandboxToProto(r.Sandbox),
		Created:           r.Created,
		ReplacedSandboxId: r.ReplacedID,
		// The domain replaces a user's sandbox only when it died, and a dead
		// sandbox's interpreter state is gone by definition.
		StateLost:      r.ReplacedID != "",
		ReplacedReason: validUTF8(r.ReplacedReason),
		Woke:           wakeToProto(r.Woke),
	}
}

func optionsFromProto(o *sandboxv1.SandboxOptions) core.Options {
	opts := core.Options{Limits: limitsFromProto(o.GetLimits()), Env: o.GetEnv(), Network: o.GetNetwork()}
	if p := o.GetNetworkPolicy(); p != nil {
		np := policyFromProto(p)
		opts.NetworkPolicy = &np
	}
	return opts
}

func fileInfoToProto(f core.FileInfo) *sandboxv1.FileInfo {
	return &sandboxv1.FileInfo{
		Path:    validUTF8(f.Path),
		Size:    f.Size,
		IsDir:   f.IsDir,
		ModTime: timestampToProto(f.ModTime),
		Type:    fileTypeToProto(f.Type),
		Mode:    modeToProto(f.Mode),
		Uid:     f.UID,
		Gid:     f.GID,
	}
}

// modeToProto gives the permission bits as chmod takes them.
func modeToProto(m fs.FileMode) uint32 {
	bits := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		bits |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		bits |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		bits |= 0o1000
	}
	return bits
}

// fileTypeToProto maps a file's kind.
func fileTypeToProto(t core.FileType) sandboxv1.FileType {
	switch t {
	case core.FileRegular:
		return sandboxv1.FileType_FILE_TYPE_FILE
	case core.FileDirectory:
		return sandboxv1.FileType_FILE_TYPE_DIRECTORY
	case core.FileSymlink:
		return sandboxv1.FileType_FILE_TYPE_SYMLINK
	case core.FileOther:
		return sandboxv1.FileType_FILE_TYPE_OTHER
	}
	return sandboxv1.FileType_FILE_TYPE_UNSPECIFIED
}

// filesToProto converts a list sorted by path and keeps it so: making a path
// valid UTF-8 can move it in that order.
func filesToProto(files []core.FileInfo) []*sandboxv1.FileInfo {
	out := make([]*sandboxv1.FileInfo, 0, len(files))
	changed := false
	for _, f := range files {
		pf := fileInfoToProto(f)
		changed = changed || pf.GetPath() != f.Path
		out = append(out, pf)
	}
	if changed {
		slices.SortStableFunc(out, func(a, b *sandboxv1.FileInfo) int { return strings.Compare(a.GetPath(), b.GetPath()) })
	}
	return out
}

// watchUpdateToProto converts one update of a watch; the path comes from
// the sandbox.
func watchUpdateToProto(u core.WatchUpdate) *sandboxv1.WatchDirectoryResponse {
	resp := &sandboxv1.WatchDirectoryResponse{Dropped: u.Dropped}
	if ev := u.Event; ev != nil {
		resp.Event = &sandboxv1.WatchEvent{Type: watchOpToProto(ev.Op), Path: validUTF8(ev.Path), Time: timestampToProto(ev.Time)}
	}
	return resp
}

func watchOpToProto(op core.WatchOp) sandboxv1.WatchEventType {
	switch op {
	case core.WatchCreate:
		return sandboxv1.WatchEventType_WATCH_EVENT_TYPE_CREATE
	case core.WatchWrite:
		return sandboxv1.WatchEventType_WATCH_EVENT_TYPE_WRITE
	case core.WatchRemove:
		return sandboxv1.WatchEventType_WATCH_EVENT_TYPE_REMOVE
	case core.WatchRename:
		return sandboxv1.WatchEventType_WATCH_EVENT_TYPE_RENAME
	}
	return sandboxv1.WatchEventType_WATCH_EVENT_TYPE_UNSPECIFIED
}

func commandStatusToProto(s string) sandboxv1.CommandStatus {
	switch s {
	case ioproto.StatusOK:
		return sandboxv1.CommandStatus_COMMAND_STATUS_OK
	case ioproto.StatusError:
		return sandboxv1.CommandStatus_COMMAND_STATUS_ERROR
	case ioproto.StatusTimeout:
		return sandboxv1.CommandStatus_COMMAND_STATUS_TIMEOUT
	case ioproto.StatusInterrupted:
		return sandboxv1.CommandStatus_COMMAND_STATUS_INTERRUPTED
	case ioproto.StatusKilled:
		return sandboxv1.CommandStatus_COMMAND_STATUS_KILLED
	}
	// Clients treat UNSPECIFIED as a failure, the safe reading of a status
	// this server does not know.
	return sandboxv1.CommandStatus_COMMAND_STATUS_UNSPECIFIED
}

// eventToProto converts one command event. commandID is set on every event
// because the /io protocol carries it only on "started". ok is false for an
// event type this server does not know (a newer driver); the caller skips it
// rather than failing the whole stream.
func eventToProto(e core.Event, commandID string) (ev *sandboxv1.ExecuteEvent, ok bool) {
	ev = &sandboxv1.ExecuteEvent{Seq: e.Seq, CommandId: commandID}
	switch e.Type {
	case ioproto.EventStarted:
		ev.Event = &sandboxv1.ExecuteEvent_Started{Started: &sandboxv1.Started{
			Language:  validUTF8(e.Language),
			Time:      timestampToProto(e.Time),
			ContextId: validUTF8(e.ContextID),
			Wake:      wakeToProto(core.WakeFromEvent(e.Wake)),
		}}
	case ioproto.EventStdout:
		ev.Event = &sandboxv1.ExecuteEvent_Stdout{Stdout: &sandboxv1.OutputChunk{Text: validUTF8(e.Text)}}
	case ioproto.EventStderr:
		ev.Event = &sandboxv1.ExecuteEvent_Stderr{Stderr: &sandboxv1.OutputChunk{Text: validUTF8(e.Text)}}
	case ioproto.EventDisplay:
		ev.Event = &sandboxv1.ExecuteEvent_Display{Display: &sandboxv1.Display{Data: mimeBundleToProto(e.Data)}}
	case ioproto.EventResult:
		ev.Event = &sandboxv1.ExecuteEvent_Result{Result: &sandboxv1.Result{Data: mimeBundleToProto(e.Data)}}
	case ioproto.EventError:
		ev.Event = &sandboxv1.ExecuteEvent_Error{Error: &sandboxv1.Error{
			Ename:     validUTF8(e.EName),
			Evalue:    validUTF8(e.EValue),
			Traceback: validUTF8s(e.Traceback),
		}}
	case ioproto.EventDone:
		d := &sandboxv1.Done{
			Status:          commandStatusToProto(e.Status),
			Duration:        durationpb.New(time.Duration(e.DurationMS) * time.Millisecond),
			StateLost:       e.StateLost,
			OutputTruncated: e.OutputTruncated,
			Reason:          validUTF8(e.Reason),
			Time:            timestampToProto(e.Time),
		}
		if e.ExitCode != nil {
			code := int32(*e.ExitCode)
			d.ExitCode = &code
		}
		if e.ExecutionCount != nil {
			n := *e.ExecutionCount
			d.ExecutionCount = &n
		}
		for _, f := range e.Files {
			d.Files = append(d.Files, &sandboxv1.FileRef{Path: validUTF8(f.Path), Size: f.Size})
		}
		ev.Event = &sandboxv1.ExecuteEvent_Done{Done: d}
	default:
		return nil, false
	}
	return ev, true
}
