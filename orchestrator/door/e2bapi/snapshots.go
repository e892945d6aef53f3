package e2bapi

import (
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// E2B's snapshots and forks, as the SDK (e2b on npm) calls them:
//
//	POST   /sandboxes/{id}/snapshots   {name?}          → {snapshotID, names}
//	GET    /snapshots?sandboxID&name&limit&nextToken    → [{snapshotID, names}], X-Next-Token
//	DELETE /templates/{id}                              → 204, or 404 (deleteSnapshot; templates.go)
//	POST   /sandboxes/{id}/fork        {timeout, count} → [{sandbox} | {error: {code, message}}]
//
// and Sandbox.create(nameOrID) starts a sandbox from a snapshot (create,
// control.go). A snapshot's names are its name, when it has one; its ID
// works wherever a name does.

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotInfoOf(s core.Snapshot) snapshotInfo {
	names := []string{}
	if s.Name != "" {
		names = append(names, s.Name)
	}
	return snapshotInfo{SnapshotID: s.ID, Names: names}
}

type snapshotRequest struct {
	Name string
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req snapshotRequest
	if err := decodeObject(r.Body, map[string]field{"name": stringField(&req.Name, 256)}); err != nil {
		s.writeError(w, r, "createSnapshot", err)
		return
	}
	sb, err := s.visible(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, "createSnapshot", err)
		return
	}
	snap, err := s.m.CreateSnapshot(r.Context(), sb.ID, req.Name)
	if err != nil {
		s.writeError(w, r, "createSnapshot", err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotInfoOf(snap))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := core.SnapshotFilter{SandboxID: q.Get("sandboxID")}
	limit, offset, err := pageOf(q)
	if err != nil {
		s.writeError(w, r, "listSnapshots", err)
		return
	}
	if c, _ := core.CallerFrom(r.Context()); c.Admin {
		f.Tenant = c.Tenant // an admin key lists its own tenant here, like any key
	}
	all, err := s.m.ListSnapshots(r.Context(), f)
	if err != nil {
		s.writeError(w, r, "listSnapshots", err)
		return
	}
	if name := q.Get("name"); name != "" {
		kept := all[:0]
		for _, sn := range all {
			if sn.Name == name || sn.ID == name {
				kept = append(kept, sn)
			}
		}
		all = kept
	}
	out := []snapshotInfo{}
	if offset < len(all) {
		for _, sn := range all[offset:min(offset+limit, len(all))] {
			out = append(out, snapshotInfoOf(sn))
		}
		if offset+limit < len(all) {
			w.Header().Set("X-Next-Token", strconv.Itoa(offset+limit))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

type forkRequest struct {
	Timeout *int64
	Count   *int64
}

// forkResult is one fork in E2B's answer: the sandbox, or its error.
type forkResult struct {
	Sandbox *sandboxCreated `json:"sandbox,omitempty"`
	Error   *forkError      `json:"error,omitempty"`
}

type forkError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var req forkRequest
	if err := decodeObject(r.Body, map[string]field{"timeout": intField(&req.Timeout), "count": intField(&req.Count)}); err != nil {
		s.writeError(w, r, "fork", err)
		return
	}
	count := int64(1)
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > core.MaxForks {
		s.writeError(w, r, "fork", badRequest("count must be 1 to "+strconv.Itoa(core.MaxForks)))
		return
	}
	d, err := timeoutOf(req.Timeout)
	if err != nil {
		s.writeError(w, r, "fork", err)
		return
	}
	src, err := s.visible(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, "fork", err)
		return
	}
	// The forks are this door's sandboxes (its user IDs: listed by
	// Sandbox.list), with the source's template, metadata and lifecycle.
	opts := core.Options{Limits: src.Limits, Metadata: src.Metadata, IdleTimeout: src.IdleTimeout, OnIdle: src.OnIdle}
	if d > 0 {
		opts.IdleTimeout = d
	}
	users := make([]string, count)
	for i := range users {
		users[i] = newUserID()
	}
	results, err := s.m.Fork(r.Context(), src.ID, core.ForkRequest{Count: int(count), UserIDs: users, Options: &opts})
	if err != nil {
		s.writeError(w, r, "fork", err)
		return
	}
	out := make([]forkResult, 0, len(results))
	for _, res := range results {
		if res.Err != nil {
			code, msg := s.classify(r.Context(), "fork", res.Err)
			out = append(out, forkResult{Error: &forkError{Code: code, Message: msg}})
			continue
		}
		c := s.created(res.Sandbox)
		out = append(out, forkResult{Sandbox: &c})
	}
	writeJSON(w, http.StatusCreated, out)
}
