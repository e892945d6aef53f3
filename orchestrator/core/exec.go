package core

import (
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/sandboxd/sandboxd/ioproto"
)

// execRecord builds the exec record of a valid req (ExecRequest.Validate),
// checking it against p and applying its defaults.
func execRecord(req ExecRequest, p CommandPolicy) (ioproto.Record, error) {
	rec := ioproto.Record{Type: ioproto.KindExec, CommandID: req.CommandID, Language: CanonicalLanguage(req.Language), Code: req.Code, ContextID: req.ContextID,
		Stdin: req.Stdin || req.Pty != (PtySize{}), Pty: ioproto.PtySize{Rows: int(req.Pty.Rows), Cols: int(req.Pty.Cols)}}
	if rec.ContextID == ioproto.DefaultContext {
		rec.ContextID = "" // the same record as without one
	}
	if rec.CommandID == "" {
		rec.CommandID = uuid.NewString()
	}
	if len(req.Env) > 0 {
		rec.Env = req.Env
	}
	if len(rec.Code) > p.MaxCodeBytes {
		return rec, Invalidf("code is %d bytes long; the limit is %d", len(rec.Code), p.MaxCodeBytes)
	}
	if !utf8.ValidString(rec.Code) {
		return rec, Invalidf("code is not valid UTF-8")
	}
	timeout := req.Timeout
	switch {
	case timeout == 0:
		timeout = p.DefaultTimeout
	case timeout > p.MaxTimeout:
		return rec, Invalidf("timeout %v exceeds the server maximum of %v", timeout, p.MaxTimeout)
	}
	rec.TimeoutMS = timeout.Milliseconds()
	return rec, nil
}
