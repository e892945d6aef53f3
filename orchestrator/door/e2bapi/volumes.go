package e2bapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// E2B's volumes (the SDK's Volume class) over the domain's (core.Volume).
// Two surfaces, both on this door's one address:
//
//   - the control plane, authenticated by X-API-KEY like the sandboxes'
//     routes: POST /volumes (create by name), GET /volumes (list), GET
//     /volumes/{volumeID} (info and token), DELETE /volumes/{volumeID};
//   - the volume content API, which the SDK reaches at E2B_VOLUME_API_URL
//     (its default is https://api.<domain>, so sandboxd's users set it to
//     this door's URL, as they set E2B_API_URL): /volumecontent/{volumeID}/
//     dir, path and file, authenticated by the volume's token
//     (Authorization: Bearer), not by an API key.
//
// A volume's token is its tenant and an HMAC of its tenant and ID under
// the door's secret (the one the sandboxes' access tokens use, with
// another label), as a sandbox's access token is an HMAC of its ID:
// nothing per volume is stored, tokens survive restarts, and one volume's
// token opens no other volume, nor the same ID in another tenant. A token
// does not expire; replacing the secret file revokes them all (and the
// sandboxes' access tokens with them).

// volumeTokenName is the name the content API's calls carry
// (core.Caller.Name): they are authorised by a volume's token, so the
// audit trail names that.
const volumeTokenName = "e2b-volume-token"

// maxVolumeMountsBody bounds volumeMounts in a create body; the domain
// allows core.MaxVolumeMounts and says so past it.
const maxVolumeMountsBody = 64

// volumeToken is a volume's content token: its tenant (base64url, so that
// a request's token says whose volume it claims, and is checked before
// anything is looked up) and an HMAC-SHA256 of the tenant and the ID.
func (s *Server) volumeToken(tenant, volumeID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tenant)) + "." + s.volumeMAC(tenant, volumeID)
}

func (s *Server) volumeMAC(tenant, volumeID string) string {
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte("e2b-volume-access:" + tenant + "\x00" + volumeID))
	return hex.EncodeToString(mac.Sum(nil))
}

// checkVolumeToken returns the tenant a volume's token was issued to,
// if tok is that volume's token (compared in constant time).
func (s *Server) checkVolumeToken(tok, volumeID string) (string, bool) {
	enc, mac, ok := strings.Cut(tok, ".")
	if !ok || len(enc) > 4*core.MaxTenantLen {
		return "", false
	}
	tenant, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(tenant) == 0 {
		return "", false
	}
	return string(tenant), hmac.Equal([]byte(mac), []byte(s.volumeMAC(string(tenant), volumeID)))
}

// e2bVolume is E2B's Volume (a list's element).
type e2bVolume struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
}

// e2bVolumeAndToken is E2B's VolumeAndToken. Its optional domain (a
// custom cluster's) is never sent: the SDK would send content requests to
// https://api.<domain>; E2B_VOLUME_API_URL names this door instead.
type e2bVolumeAndToken struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token"`
}

func (s *Server) volumeAndToken(v core.Volume) e2bVolumeAndToken {
	return e2bVolumeAndToken{VolumeID: v.ID, Name: v.Name, Token: s.volumeToken(v.Tenant, v.ID)}
}

// createVolume answers POST /volumes {name}: a volume of the server's
// default size (E2B's NewVolume has no size).
func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var name string
	if err := decodeObject(r.Body, map[string]field{"name": stringField(&name, maxNameLen)}); err != nil {
		s.writeError(w, r, "create volume", err)
		return
	}
	v, err := s.m.CreateVolume(r.Context(), name, 0)
	if err != nil {
		s.writeError(w, r, "create volume", err)
		return
	}
	writeJSON(w, http.StatusCreated, s.volumeAndToken(v))
}

// listVolumes answers GET /volumes: the caller's tenant's volumes (an
// admin key lists its own tenant here, as with sandboxes).
func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := s.m.ListVolumes(r.Context(), s.ownTenant(r.Context()))
	if err != nil {
		s.writeError(w, r, "list volumes", err)
		return
	}
	out := make([]e2bVolume, 0, len(vs))
	for _, v := range vs {
		out = append(out, e2bVolume{VolumeID: v.ID, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
}

// ownTenant is the tenant filter that lists the caller's own tenant: ""
// (the domain's default, the caller's) unless the caller is an admin.
func (s *Server) ownTenant(ctx context.Context) string {
	if c, _ := core.CallerFrom(ctx); c.Admin {
		return c.Tenant
	}
	return ""
}

// getVolume answers GET /volumes/{volumeID} with the volume and its
// token; 404 is the SDK's VolumeNotFoundError. A name is accepted too
// (the domain's reference); the answer names the ID.
func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.m.GetVolume(r.Context(), r.PathValue("volumeID"))
	if err != nil {
		s.writeError(w, r, "get volume", err)
		return
	}
	writeJSON(w, http.StatusOK, s.volumeAndToken(v))
}

// deleteVolume answers DELETE /volumes/{volumeID}: 204, or 404, which the
// SDK's destroy turns into false.
//
// It does not force. The SDK's destroy says nothing of mounted volumes,
// and forcing would take the files from under running sandboxes without
// their owners asking for it; a mounted volume is a 409 whose message
// names the sandboxes (core.VolumeInUse), which destroy raises as a
// VolumeError: kill them (or wait for them to end) and destroy again.
func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.m.DeleteVolume(r.Context(), r.PathValue("volumeID"), false); err != nil {
		s.writeError(w, r, "delete volume", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volumeContent authenticates a content request by its volume's token
// (Authorization: Bearer), then admits its body (how) and runs h as the
// volume's tenant, with the volume's ID in the context. The path names
// the volume by ID (the SDK's volumeId). The token is checked before
// anything is looked up (a wrong one costs an HMAC), and the volume is
// looked up as the token's tenant: a volume that does not exist (any
// more) and a wrong token get the same 401, so the API tells nothing of
// other tenants' volumes to a caller without their token.
func (s *Server) volumeContent(how admission, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, err := s.volumeContext(r)
		if err != nil {
			s.writeVolumeError(w, r, "volume auth", err)
			return
		}
		r = r.WithContext(ctx)
		if how != streamed && !s.limitBody(w, r, maxControlBody) {
			return
		}
		if !s.admit(w, r, core.CallerOf(ctx).Tenant, how) {
			return
		}
		h(w, r)
	}
}

type volumeKey struct{}

// volumeFrom returns the volume ID volumeContext put in ctx.
func volumeFrom(ctx context.Context) string {
	id, _ := ctx.Value(volumeKey{}).(string)
	return id
}

var errVolumeToken = &apiError{status: http.StatusUnauthorized,
	msg: "the volume's token (Authorization: Bearer, from Volume.create or Volume.connect) is missing or wrong"}

func (s *Server) volumeContext(r *http.Request) (context.Context, error) {
	id := r.PathValue("volumeID")
	if !core.IsVolumeID(id) {
		return nil, badRequest(fmt.Sprintf("volume %q: the content API names a volume by its ID (vol-…)", sanitizeHeader(id)))
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return nil, errVolumeToken
	}
	tenant, ok := s.checkVolumeToken(tok, id)
	if !ok {
		return nil, errVolumeToken
	}
	// The volume must still be the tenant's (a token outlives its volume).
	ctx := core.WithCaller(r.Context(), core.Caller{Tenant: tenant, Name: volumeTokenName})
	v, err := s.m.GetVolume(ctx, id)
	switch {
	case core.ClassOf(err) == core.ErrNotFound:
		return nil, errVolumeToken
	case err != nil:
		return nil, err
	case v.ID != id || v.Tenant != tenant:
		return nil, errVolumeToken
	}
	return context.WithValue(ctx, volumeKey{}, v.ID), nil
}

// writeVolumeError answers a content request with the content API's
// Error {code, message}, whose code is a string there; the status is the
// door's one mapping (classify). The SDK turns 404 into
// VolumePathNotFoundError, others into VolumeError with the message.
func (s *Server) writeVolumeError(w http.ResponseWriter, r *http.Request, op string, err error) {
	code, msg := s.classify(r.Context(), op, err)
	writeJSON(w, code, map[string]any{"code": strconv.Itoa(code), "message": msg})
}

// e2bVolumeEntry is the content API's VolumeEntryStat.
type e2bVolumeEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	// The domain keeps one time per file, its modification time: atime
	// and ctime are that time too.
	Atime time.Time `json:"atime"`
	Mtime time.Time `json:"mtime"`
	Ctime time.Time `json:"ctime"`
}

// volumeEntryOf converts a domain FileInfo (its path relative to the
// volume's root). Names come from sandboxes, which write to volumes too:
// invalid UTF-8 is replaced (as the gRPC door does, and as encoding/json
// would silently), and JSON escapes the rest (control characters,
// quotes); nothing of a name reaches a header.
func volumeEntryOf(fi core.FileInfo) e2bVolumeEntry {
	rel := validUTF8(fi.Path)
	if rel == "" {
		rel = "."
	}
	name := path.Base(rel)
	if rel == "." {
		name = "/"
	}
	t := "unknown"
	switch fi.Type {
	case core.FileRegular:
		t = "file"
	case core.FileDirectory:
		t = "directory"
	case core.FileSymlink:
		t = "symlink"
	}
	mt := fi.ModTime.UTC()
	return e2bVolumeEntry{Name: name, Type: t, Path: core.VolumePathDisplay(rel), Size: fi.Size,
		Mode: uint32(fi.Mode.Perm()), UID: fi.UID, GID: fi.GID, Atime: mt, Mtime: mt, Ctime: mt}
}

func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// fileAttributes turns E2B's uid, gid and mode (any of them nil: not
// given) into the domain's. A mode may carry a file type's bits (a full
// st_mode); they are dropped, the rest is the domain's to judge
// (core.ValidateFileAttributes: no setuid or setgid). ok is false when
// none was given.
func fileAttributes(uid, gid, mode *int64) (a core.FileAttributes, ok bool, err error) {
	owner := func(name string, v *int64) (*uint32, error) {
		if v == nil {
			return nil, nil
		}
		if *v < 0 || *v > core.MaxFileOwner {
			return nil, badRequest(fmt.Sprintf("%s %d: want 0 to %d", name, *v, core.MaxFileOwner))
		}
		u := uint32(*v)
		return &u, nil
	}
	if a.UID, err = owner("uid", uid); err != nil {
		return a, false, err
	}
	if a.GID, err = owner("gid", gid); err != nil {
		return a, false, err
	}
	if mode != nil {
		m := *mode &^ 0o170000 // S_IFMT
		if m < 0 || m > 0o7777 {
			return a, false, badRequest(fmt.Sprintf("mode %#o: want permission bits (e.g. 0o644)", *mode))
		}
		fm := core.ChmodMode(uint32(m))
		a.Mode = &fm
	}
	return a, a.UID != nil || a.GID != nil || a.Mode != nil, nil
}

// queryAttributes reads uid, gid and mode from a query (makeDir's and
// writeFile's).
func queryAttributes(q url.Values) (core.FileAttributes, bool, error) {
	var vals [3]*int64
	for i, k := range []string{"uid", "gid", "mode"} {
		if !q.Has(k) {
			continue
		}
		n, err := strconv.ParseInt(q.Get(k), 10, 64)
		if err != nil {
			return core.FileAttributes{}, false, badRequest(fmt.Sprintf("%s: want a whole number, got %q", k, sanitizeHeader(q.Get(k))))
		}
		vals[i] = &n
	}
	return fileAttributes(vals[0], vals[1], vals[2])
}

// boolQuery reads a boolean query parameter (absent: false).
func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest(fmt.Sprintf("%s: want true or false, got %q", name, sanitizeHeader(v)))
	}
	return b, nil
}

// listVolumeDir answers GET /volumecontent/{volumeID}/dir?path=&depth=
// (depth 1 when absent): the entries under path, streamed as a JSON array
// one entry at a time, so that the answer is not built twice in memory.
func (s *Server) listVolumeDir(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	depth := 1
	if d := q.Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil {
			s.writeVolumeError(w, r, "volume list", badRequest(fmt.Sprintf("depth: want a whole number, got %q", sanitizeHeader(d))))
			return
		}
		depth = n
	}
	list, err := s.m.VolumeListFiles(r.Context(), volumeFrom(r.Context()), q.Get("path"), depth)
	if err != nil {
		s.writeVolumeError(w, r, "volume list", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	_, _ = io.WriteString(w, "[")
	for i, fi := range list {
		if i > 0 {
			_, _ = io.WriteString(w, ",")
		}
		if err := enc.Encode(volumeEntryOf(fi)); err != nil {
			return
		}
	}
	_, _ = io.WriteString(w, "]\n")
}

// makeVolumeDir answers POST /volumecontent/{volumeID}/dir?path=&force=:
// force makes the parents too.
func (s *Server) makeVolumeDir(w http.ResponseWriter, r *http.Request) {
	attrs, setAttrs, err := queryAttributes(r.URL.Query())
	if err != nil {
		s.writeVolumeError(w, r, "volume mkdir", err)
		return
	}
	parents, err := boolQuery(r, "force")
	if err == nil {
		err = drain(r.Body)
	}
	if err != nil {
		s.writeVolumeError(w, r, "volume mkdir", err)
		return
	}
	fi, err := s.m.VolumeMakeDirectory(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"), parents)
	if err == nil && setAttrs {
		fi, err = s.m.VolumeSetAttributes(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"), attrs)
	}
	if err != nil {
		s.writeVolumeError(w, r, "volume mkdir", err)
		return
	}
	writeJSON(w, http.StatusCreated, volumeEntryOf(fi))
}

// statVolumePath answers GET /volumecontent/{volumeID}/path?path=; 404 is
// the SDK's VolumePathNotFoundError (exists() answers false on it).
func (s *Server) statVolumePath(w http.ResponseWriter, r *http.Request) {
	fi, err := s.m.VolumeStat(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"))
	if err != nil {
		s.writeVolumeError(w, r, "volume stat", err)
		return
	}
	writeJSON(w, http.StatusOK, volumeEntryOf(fi))
}

// updateVolumePath answers PATCH /volumecontent/{volumeID}/path?path=
// {uid, gid, mode}: sets those given and answers the entry; with none it
// changes nothing.
func (s *Server) updateVolumePath(w http.ResponseWriter, r *http.Request) {
	var uid, gid, mode *int64
	err := decodeObject(r.Body, map[string]field{"uid": intField(&uid), "gid": intField(&gid), "mode": intField(&mode)})
	var attrs core.FileAttributes
	var set bool
	if err == nil {
		attrs, set, err = fileAttributes(uid, gid, mode)
	}
	if err != nil {
		s.writeVolumeError(w, r, "volume metadata", err)
		return
	}
	if !set {
		s.statVolumePath(w, r)
		return
	}
	fi, err := s.m.VolumeSetAttributes(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"), attrs)
	if err != nil {
		s.writeVolumeError(w, r, "volume metadata", err)
		return
	}
	writeJSON(w, http.StatusOK, volumeEntryOf(fi))
}

// removeVolumePath answers DELETE /volumecontent/{volumeID}/path?path=:
// a file, or a directory with what it holds (the SDK's remove has no
// recursive flag, and E2B's files.remove removes directories whole).
func (s *Server) removeVolumePath(w http.ResponseWriter, r *http.Request) {
	if err := s.m.VolumeRemove(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"), true); err != nil {
		s.writeVolumeError(w, r, "volume remove", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readVolumeFile answers GET /volumecontent/{volumeID}/file?path=: the
// file's bytes, streamed from the domain.
func (s *Server) readVolumeFile(w http.ResponseWriter, r *http.Request) {
	rc, fi, err := s.m.VolumeDownload(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"))
	if err != nil {
		s.writeVolumeError(w, r, "volume read", err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, io.LimitReader(rc, fi.Size))
}

// writeVolumeFile answers PUT /volumecontent/{volumeID}/file?path=&force=:
// the body, streamed into the domain (bounded there by --max-upload, and
// by its deadline and minimum rate here); force overwrites an existing
// file, as the SDK's VolumeWriteOpts.force says, else an existing file is
// a conflict.
func (s *Server) writeVolumeFile(w http.ResponseWriter, r *http.Request) {
	attrs, setAttrs, err := queryAttributes(r.URL.Query())
	if err != nil {
		s.writeVolumeError(w, r, "volume write", err)
		return
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		s.writeVolumeError(w, r, "volume write", badRequest(fmt.Sprintf("Content-Encoding %q is not supported", sanitizeHeader(ce))))
		return
	}
	overwrite, err := boolQuery(r, "force")
	if err != nil {
		s.writeVolumeError(w, r, "volume write", err)
		return
	}
	rb := &recordedBody{ReadCloser: r.Body}
	fi, err := s.m.VolumeUpload(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"), rb, overwrite)
	if err == nil && setAttrs {
		fi, err = s.m.VolumeSetAttributes(r.Context(), volumeFrom(r.Context()), r.URL.Query().Get("path"), attrs)
	}
	if err != nil {
		s.writeVolumeError(w, r, "volume write", cmpErr(rb.failure(), err))
		return
	}
	writeJSON(w, http.StatusOK, volumeEntryOf(fi))
}

// volumeMountsField decodes a create body's volumeMounts, E2B's
// SandboxVolumeMount list [{name, path}], into the domain's mounts: the
// name is the volume's reference (the SDK sends a Volume's name, or the
// string it was given, which may be an ID too).
func volumeMountsField(dst *[]core.VolumeMount) field {
	return arrayField(maxVolumeMountsBody, func(i int) field {
		return func(b *jsonBody, name string) error {
			var m core.VolumeMount
			present := false
			err := objectField(&present, map[string]field{
				"name":     stringField(&m.Volume, maxNameLen),
				"path":     stringField(&m.Path, maxPathLen),
				"readOnly": boolValueField(&m.ReadOnly),
			})(b, name)
			if err != nil {
				return err
			}
			if !present {
				return badRequest(name + " is null; want {name, path}")
			}
			*dst = append(*dst, m)
			return nil
		}
	})
}

// boolValueField decodes a boolean into a plain bool (null leaves it).
func boolValueField(dst *bool) field {
	var p *bool
	f := boolField(&p)
	return func(b *jsonBody, name string) error {
		if err := f(b, name); err != nil {
			return err
		}
		if p != nil {
			*dst = *p
		}
		return nil
	}
}

// e2bVolumeMount is E2B's SandboxVolumeMount.
type e2bVolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// volumeNames returns the names of the caller's volumes by ID, looked up
// once for the sandboxes given, and only when one of them mounts a
// volume; nil when none does or the lookup fails (a mount then shows its
// volume's ID, as it does for a volume deleted by force).
func (s *Server) volumeNames(ctx context.Context, sbs ...core.Sandbox) map[string]string {
	need := false
	for _, sb := range sbs {
		need = need || len(sb.Volumes) > 0
	}
	if !need {
		return nil
	}
	vs, err := s.m.ListVolumes(ctx, s.ownTenant(ctx))
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			s.log.WarnContext(ctx, "listing volumes for sandbox info", "error", err.Error())
		}
		return nil
	}
	names := make(map[string]string, len(vs))
	for _, v := range vs {
		names[v.ID] = v.Name
	}
	return names
}

// volumeMountsOf is a sandbox's mounts as E2B shows them, by volume name.
func volumeMountsOf(sb core.Sandbox, names map[string]string) []e2bVolumeMount {
	out := make([]e2bVolumeMount, 0, len(sb.Volumes))
	for _, m := range sb.Volumes {
		out = append(out, e2bVolumeMount{Name: cmpOr(names[m.Volume], m.Volume), Path: m.Path})
	}
	return out
}
