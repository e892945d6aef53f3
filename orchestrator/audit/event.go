// Package audit is sandboxd's audit trail: who did what to which sandbox,
// when, and how it ended. Audited records every mutating call of the
// domain's port (core.Manager) once, in front of the backend, so the gRPC
// door, the E2B door and the ports front are all covered by one
// decorator; Log keeps the records in a rotating JSON-lines file in the
// state directory and answers queries over it (ListAuditEvents).
//
// A record holds the caller's identity (tenant, token name, admin flag;
// never the token), the action, the sandbox (and user, for acquire), the
// outcome and the duration, and a few non-secret details (a path, a
// command ID, a byte count). It never holds code, environment values,
// file contents, stdin or network rules: only their sizes.
//
// The package depends on core, never the reverse: core stays free of
// files and rotation.
package audit

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The actions, one stable snake_case name per mutating method of
// core.Manager (see Audited for which methods are recorded and why).
const (
	ActionAcquire             = "acquire"
	ActionDelete              = "delete"
	ActionSetTimeout          = "set_timeout"
	ActionHibernate           = "hibernate"
	ActionWake                = "wake"
	ActionCreateSnapshot      = "create_snapshot"
	ActionDeleteSnapshot      = "delete_snapshot"
	ActionFork                = "fork"
	ActionUpdateNetworkPolicy = "update_network_policy"
	ActionExecute             = "execute"
	ActionInterrupt           = "interrupt"
	ActionCreateContext       = "create_context"
	ActionRestartContext      = "restart_context"
	ActionDeleteContext       = "delete_context"
	ActionWriteFile           = "write_file"
	ActionMkdir               = "mkdir"
	ActionRemove              = "remove"
	ActionMove                = "move"
	ActionCreateVolume        = "create_volume"
	ActionDeleteVolume        = "delete_volume"
	ActionVolumeWriteFile     = "volume_write_file"
	ActionVolumeMkdir         = "volume_mkdir"
	ActionVolumeRemove        = "volume_remove"
	ActionVolumeSetAttributes = "volume_set_attributes"
	ActionUploadTemplateFile  = "upload_template_file"
	ActionBuildTemplate       = "build_template"
	ActionDeleteTemplate      = "delete_template"
	// ActionDropped is the log's own record: Dropped records were lost
	// because the queue was full (Log). It has no tenant, so only admins
	// see it.
	ActionDropped = "dropped"
)

// Actions is every action a record may have, in the Manager's order.
var Actions = []string{
	ActionAcquire, ActionDelete, ActionSetTimeout, ActionHibernate, ActionWake,
	ActionCreateSnapshot, ActionDeleteSnapshot, ActionFork,
	ActionUpdateNetworkPolicy, ActionExecute, ActionInterrupt,
	ActionCreateContext, ActionRestartContext, ActionDeleteContext,
	ActionWriteFile, ActionMkdir, ActionRemove, ActionMove,
	ActionCreateVolume, ActionDeleteVolume, ActionVolumeWriteFile, ActionVolumeMkdir, ActionVolumeRemove,
	ActionVolumeSetAttributes, ActionUploadTemplateFile, ActionBuildTemplate, ActionDeleteTemplate, ActionDropped,
}

// OutcomeOK is the outcome of a call that succeeded; a failed one's is its
// error class in snake_case (core.ErrNotFound: "not_found"), "canceled" or
// "deadline_exceeded" for the caller's context, "internal" otherwise.
const OutcomeOK = "ok"

// Event is one audit record, one line of the log as JSON.
type Event struct {
	Time time.Time `json:"time"`
	// Tenant, TokenName and Admin are the caller (core.Caller).
	Tenant    string `json:"tenant,omitempty"`
	TokenName string `json:"token_name,omitempty"`
	Admin     bool   `json:"admin,omitempty"`
	Action    string `json:"action"`
	SandboxID string `json:"sandbox_id,omitempty"`
	// UserID is acquire's user.
	UserID string `json:"user_id,omitempty"`
	// Path is the file operations' path (move's source), ToPath move's
	// destination.
	Path   string `json:"path,omitempty"`
	ToPath string `json:"to_path,omitempty"`
	// CommandID is execute's and interrupt's command, ContextID the
	// contexts' context; Language is execute's and create_context's.
	CommandID string `json:"command_id,omitempty"`
	ContextID string `json:"context_id,omitempty"`
	// Snapshot is create_snapshot's and delete_snapshot's snapshot (its ID,
	// or the name given) and acquire's from_snapshot; Count fork's forks.
	Snapshot string `json:"snapshot,omitempty"`
	Count    int    `json:"count,omitempty"`
	// Volume is the volume calls' volume (its ID, or the name given), and
	// acquire's Options.Volumes (their references, comma-separated).
	Volume string `json:"volume,omitempty"`
	// Template is build_template's and delete_template's template (its
	// ID, or the name given), upload_template_file's archive key, and
	// acquire's Options.Template.
	Template string `json:"template,omitempty"`
	Language string `json:"language,omitempty"`
	// Bytes is a size in place of content: execute's code, write_file's
	// bytes received.
	Bytes int64 `json:"bytes,omitempty"`
	// Outcome is OutcomeOK or the error's kind; Message the error's
	// message, bounded.
	Outcome  string        `json:"outcome"`
	Message  string        `json:"message,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// Dropped is the number of records lost before a dropped record.
	Dropped int64 `json:"dropped,omitempty"`
}

// Bounds of a record's strings: a record stays a few hundred bytes whatever
// a caller sends (IDs and names are bounded by the domain's rules, but
// refused requests are recorded too, before those rules).
const (
	maxField   = 256
	maxMessage = 512
)

// bound cuts s to at most n bytes, marking the cut. It cuts on a rune
// boundary: back from n over at most utf8.UTFMax-1 continuation bytes, so
// a value with invalid UTF-8 is cut there too, not emptied.
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > n-(utf8.UTFMax-1) && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// bounded returns e with every string field bounded: Message to
// maxMessage, every other to maxField. The fields are found by
// reflection, so a string field added later is bounded without anyone
// having to remember it (a record holds what a refused request sent,
// before the domain's rules bounded it).
func (e Event) bounded() Event {
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.String || !f.CanSet() { // unexported: never written
			continue
		}
		n := maxField
		if v.Type().Field(i).Name == "Message" {
			n = maxMessage
		}
		f.SetString(bound(f.String(), n))
	}
	return e
}

// Outcome names err's kind for a record: OutcomeOK for nil.
func Outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	if c := core.ClassOf(err); c != nil {
		return strings.ReplaceAll(c.Error(), " ", "_")
	}
	return "internal"
}
