package e2bapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// The volume routes' tests run the door over coretest's fake behind the
// domain's validating layer (what sandboxd serves), its volume calls
// scripted by volStore: an in-memory store of volumes and their files.

const otherTestKey = "e2b_fedcba9876543210fedc"

// volStore scripts the fake's volume calls.
type volStore struct {
	mu    sync.Mutex
	vols  map[string]core.Volume
	files map[string]map[string][]byte // volume ID → path → content (nil: a directory)
	// last recorded arguments
	overwrite, parents, recursive bool
	depth                         int
	force                         []bool
	attrs                         []core.FileAttributes
}

func (st *volStore) find(ctx context.Context, ref string) (core.Volume, error) {
	c := core.CallerOf(ctx)
	for _, v := range st.vols {
		if (v.ID == ref || v.Name == ref) && (c.Admin || v.Tenant == c.Tenant) {
			return v, nil
		}
	}
	return core.Volume{}, core.VolumeNotFound(ref)
}

func (st *volStore) install(m *coretest.Manager) {
	m.CreateVolumeFunc = func(ctx context.Context, name string, size int64) (core.Volume, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		if _, err := st.find(ctx, name); err == nil {
			return core.Volume{}, core.Errorf(core.ErrAlreadyExists, "volume %s exists", name)
		}
		v := core.Volume{ID: core.NewVolumeID(), Name: name, Tenant: core.CallerOf(ctx).Tenant, SizeBytes: size, CreatedAt: time.Now()}
		st.vols[v.ID] = v
		st.files[v.ID] = map[string][]byte{}
		return v, nil
	}
	m.GetVolumeFunc = func(ctx context.Context, ref string) (core.Volume, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.find(ctx, ref)
	}
	m.ListVolumesFunc = func(ctx context.Context, tenant string) ([]core.Volume, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		c := core.CallerOf(ctx)
		var out []core.Volume
		for _, v := range st.vols {
			if (c.Admin && (tenant == "" || v.Tenant == tenant)) || (!c.Admin && v.Tenant == c.Tenant) {
				out = append(out, v)
			}
		}
		slices.SortFunc(out, func(a, b core.Volume) int { return strings.Compare(a.Name, b.Name) })
		return out, nil
	}
	m.DeleteVolumeFunc = func(ctx context.Context, ref string, force bool) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.force = append(st.force, force)
		v, err := st.find(ctx, ref)
		if err != nil {
			return err
		}
		if len(v.MountedBy) > 0 && !force {
			return core.VolumeInUse(ref, v.MountedBy)
		}
		delete(st.vols, v.ID)
		return nil
	}
	m.VolumeUploadFunc = func(ctx context.Context, ref, p string, r io.Reader, overwrite bool) (core.FileInfo, error) {
		v, err := st.lockedFind(ctx, ref)
		if err != nil {
			return core.FileInfo{}, err
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return core.FileInfo{}, err
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		st.overwrite = overwrite
		if _, ok := st.files[v.ID][p]; ok && !overwrite {
			return core.FileInfo{}, core.Errorf(core.ErrAlreadyExists, "%s exists", p)
		}
		st.files[v.ID][p] = b
		return fileInfo(p, b), nil
	}
	m.VolumeDownloadFunc = func(ctx context.Context, ref, p string) (io.ReadCloser, core.FileInfo, error) {
		fi, err := st.stat(ctx, ref, p)
		if err != nil {
			return nil, fi, err
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		v, _ := st.find(ctx, ref)
		return io.NopCloser(bytes.NewReader(st.files[v.ID][p])), fi, nil
	}
	m.VolumeStatFunc = st.stat
	m.VolumeListFilesFunc = func(ctx context.Context, ref, p string, depth int) ([]core.FileInfo, error) {
		v, err := st.lockedFind(ctx, ref)
		if err != nil {
			return nil, err
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		st.depth = depth
		var out []core.FileInfo
		for name, b := range st.files[v.ID] {
			rel, ok := name, p == "."
			if !ok {
				rel, ok = strings.CutPrefix(name, p+"/")
			}
			if ok && strings.Count(rel, "/") < depth {
				out = append(out, fileInfo(name, b))
			}
		}
		slices.SortFunc(out, func(a, b core.FileInfo) int { return strings.Compare(a.Path, b.Path) })
		return out, nil
	}
	m.VolumeMakeDirectoryFunc = func(ctx context.Context, ref, p string, parents bool) (core.FileInfo, error) {
		v, err := st.lockedFind(ctx, ref)
		if err != nil {
			return core.FileInfo{}, err
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		st.parents = parents
		for d := p; parents && d != "."; d = path.Dir(d) {
			st.files[v.ID][d] = nil
		}
		st.files[v.ID][p] = nil
		return fileInfo(p, nil), nil
	}
	m.VolumeSetAttributesFunc = func(ctx context.Context, ref, p string, a core.FileAttributes) (core.FileInfo, error) {
		fi, err := st.stat(ctx, ref, p)
		if err != nil {
			return fi, err
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		st.attrs = append(st.attrs, a)
		if a.UID != nil {
			fi.UID = *a.UID
		}
		if a.GID != nil {
			fi.GID = *a.GID
		}
		if a.Mode != nil {
			fi.Mode = fi.Mode&fs.ModeType | *a.Mode
		}
		return fi, nil
	}
	m.VolumeRemoveFunc = func(ctx context.Context, ref, p string, recursive bool) error {
		if _, err := st.stat(ctx, ref, p); err != nil {
			return err
		}
		v, _ := st.lockedFind(ctx, ref)
		st.mu.Lock()
		defer st.mu.Unlock()
		st.recursive = recursive
		for name := range st.files[v.ID] {
			if name == p || recursive && strings.HasPrefix(name, p+"/") {
				delete(st.files[v.ID], name)
			}
		}
		return nil
	}
}

func (st *volStore) lockedFind(ctx context.Context, ref string) (core.Volume, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.find(ctx, ref)
}

func (st *volStore) stat(ctx context.Context, ref, p string) (core.FileInfo, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	v, err := st.find(ctx, ref)
	if err != nil {
		return core.FileInfo{}, err
	}
	if p == "." {
		return fileInfo(".", nil), nil
	}
	b, ok := st.files[v.ID][p]
	if !ok {
		return core.FileInfo{}, core.Errorf(core.ErrNotFound, "%s does not exist", core.VolumePathDisplay(p))
	}
	return fileInfo(p, b), nil
}

var testModTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fileInfo is a file of b, or a directory when b is nil.
func fileInfo(p string, b []byte) core.FileInfo {
	if b == nil {
		return core.FileInfo{Path: p, IsDir: true, Type: core.FileDirectory, Mode: 0o755 | 1<<31, ModTime: testModTime, UID: 1000, GID: 1000}
	}
	return core.FileInfo{Path: p, Size: int64(len(b)), Type: core.FileRegular, Mode: 0o644, ModTime: testModTime, UID: 1000, GID: 1000}
}

// newVolumeServer is a door over the fake with two tenants' keys: testKey
// (acme) and otherTestKey (beta).
func newVolumeServer(t *testing.T) (*Server, *coretest.Manager, *volStore) {
	t.Helper()
	toks, err := tokens.Parse(strings.NewReader(testKey + " acme user\n" + otherTestKey + " beta user\n"))
	if err != nil {
		t.Fatal(err)
	}
	fake := &coretest.Manager{}
	st := &volStore{vols: map[string]core.Volume{}, files: map[string]map[string][]byte{}}
	st.install(fake)
	s, err := New(coretest.Validated(fake), Config{Tokens: toks, Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	return s, fake, st
}

func key(k string) map[string]string { return map[string]string{"X-API-KEY": k} }

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("answer %q: %v", w.Body, err)
	}
	return v
}

// createVol creates a volume through the door and returns its answer.
func createVol(t *testing.T, s *Server, k, name string) e2bVolumeAndToken {
	t.Helper()
	w := do(s, "POST", "/volumes", key(k), `{"name":"`+name+`"}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create %s: %d %s", name, w.Code, w.Body)
	}
	return decode[e2bVolumeAndToken](t, w)
}

func TestUnitVolumeControlPlane(t *testing.T) {
	s, _, st := newVolumeServer(t)
	if w := do(s, "POST", "/volumes", nil, `{"name":"data"}`); w.Code != http.StatusUnauthorized {
		t.Fatalf("no key: %d %s", w.Code, w.Body)
	}
	v := createVol(t, s, testKey, "data")
	if !core.IsVolumeID(v.VolumeID) || v.Name != "data" || v.Token != s.volumeToken("acme", v.VolumeID) {
		t.Errorf("create answered %+v", v)
	}
	if got := st.vols[v.VolumeID].SizeBytes; got != core.DefaultVolumeBytes {
		t.Errorf("created with %d bytes, want the default", got)
	}
	// The raw answer has exactly VolumeAndToken's fields (no domain).
	w := do(s, "GET", "/volumes/"+v.VolumeID, key(testKey), "")
	if w.Code != http.StatusOK {
		t.Fatalf("get: %d %s", w.Code, w.Body)
	}
	raw := decode[map[string]any](t, w)
	if len(raw) != 3 || raw["volumeID"] != v.VolumeID || raw["name"] != "data" || raw["token"] != v.Token {
		t.Errorf("get answered %v", raw)
	}
	if w := do(s, "POST", "/volumes", key(testKey), `{"name":"data"}`); w.Code != http.StatusConflict {
		t.Errorf("a second volume of the name: %d %s", w.Code, w.Body)
	}
	for _, bad := range []string{`{"name":""}`, `{}`, `{"name":"a b"}`, `{"name":"vol-aaaaaaaaaaaaaaaaaaaa"}`, `{"name":1}`} {
		if w := do(s, "POST", "/volumes", key(testKey), bad); w.Code != http.StatusBadRequest {
			t.Errorf("create %s: %d %s", bad, w.Code, w.Body)
		}
	}
	createVol(t, s, testKey, "logs")
	other := createVol(t, s, otherTestKey, "theirs")

	w = do(s, "GET", "/volumes", key(testKey), "")
	list := decode[[]map[string]any](t, w)
	if w.Code != http.StatusOK || len(list) != 2 || list[0]["name"] != "data" || list[0]["volumeID"] != v.VolumeID || list[1]["name"] != "logs" || len(list[0]) != 2 {
		t.Errorf("list: %d %v", w.Code, list)
	}
	// Another tenant's volume is not found, by ID or by name.
	for _, ref := range []string{other.VolumeID, "theirs", "vol-bbbbbbbbbbbbbbbbbbbb"} {
		if w := do(s, "GET", "/volumes/"+ref, key(testKey), ""); w.Code != http.StatusNotFound {
			t.Errorf("get %s: %d %s", ref, w.Code, w.Body)
		}
		if w := do(s, "DELETE", "/volumes/"+ref, key(testKey), ""); w.Code != http.StatusNotFound {
			t.Errorf("delete %s: %d %s", ref, w.Code, w.Body)
		}
	}
	// A mounted volume is not deleted: 409 naming the sandbox, no force.
	mounted := st.vols[v.VolumeID]
	mounted.MountedBy = []string{"sb-aaaaaaaaaaaaaaaaaaaa"}
	st.vols[v.VolumeID] = mounted
	w = do(s, "DELETE", "/volumes/"+v.VolumeID, key(testKey), "")
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "sb-aaaaaaaaaaaaaaaaaaaa") {
		t.Errorf("delete of a mounted volume: %d %s", w.Code, w.Body)
	}
	mounted.MountedBy = nil
	st.vols[v.VolumeID] = mounted
	if w := do(s, "DELETE", "/volumes/"+v.VolumeID, key(testKey), ""); w.Code != http.StatusNoContent {
		t.Errorf("delete: %d %s", w.Code, w.Body)
	}
	if w := do(s, "DELETE", "/volumes/"+v.VolumeID, key(testKey), ""); w.Code != http.StatusNotFound {
		t.Errorf("delete again: %d %s (the SDK's destroy answers false on 404)", w.Code, w.Body)
	}
	if slices.Contains(st.force, true) {
		t.Errorf("deletes forced: %v", st.force)
	}
}

func TestUnitVolumeContentAuth(t *testing.T) {
	s, fake, _ := newVolumeServer(t)
	a := createVol(t, s, testKey, "a")
	b := createVol(t, s, testKey, "b")
	theirs := createVol(t, s, otherTestKey, "a")
	url := func(v e2bVolumeAndToken) string { return "/volumecontent/" + v.VolumeID + "/path?path=/" }
	if w := do(s, "GET", url(a), bearer(a.Token), ""); w.Code != http.StatusOK {
		t.Fatalf("own token: %d %s", w.Code, w.Body)
	}
	if w := do(s, "GET", url(theirs), bearer(theirs.Token), ""); w.Code != http.StatusOK {
		t.Fatalf("the other tenant's own token: %d %s", w.Code, w.Body)
	}
	for name, c := range map[string]struct {
		url string
		hdr map[string]string
	}{
		"no token":                   {url(a), nil},
		"an API key":                 {url(a), key(testKey)},
		"a wrong token":              {url(a), bearer(strings.Repeat("0", 64))},
		"another volume's token":     {url(a), bearer(b.Token)},
		"another tenant's token":     {url(a), bearer(theirs.Token)},
		"a token for another tenant": {url(theirs), bearer(s.volumeToken("acme", theirs.VolumeID))},
		"the token, not as Bearer":   {url(a), map[string]string{"Authorization": a.Token}},
		"a sandbox access token":     {url(a), bearer(s.accessToken(a.VolumeID))},
		"a volume that is not":       {"/volumecontent/vol-cccccccccccccccccccc/path?path=/", bearer(s.volumeToken("acme", "vol-cccccccccccccccccccc"))},
	} {
		for _, m := range []string{"GET /path", "GET /dir", "GET /file", "PUT /file", "POST /dir", "DELETE /path", "PATCH /path"} {
			method, route, _ := strings.Cut(m, " ")
			u := strings.Replace(c.url, "/path?", route+"?", 1)
			if w := do(s, method, u, c.hdr, "x"); w.Code != http.StatusUnauthorized {
				t.Errorf("%s, %s: %d %s", name, m, w.Code, w.Body)
			}
		}
	}
	// A token that is not one of this door's costs no lookup.
	calls := len(fake.Calls())
	for _, tok := range []string{"", "x", strings.Repeat("0", 64), "YWNtZQ." + strings.Repeat("0", 64), "!!." + a.Token, a.Token + "0", b.Token} {
		if w := do(s, "GET", url(a), bearer(tok), ""); w.Code != http.StatusUnauthorized {
			t.Errorf("token %q: %d %s", tok, w.Code, w.Body)
		}
	}
	if c := fake.Calls()[calls:]; len(c) > 0 {
		t.Errorf("wrong tokens reached the domain: %v", c)
	}
	// The content API names a volume by ID.
	if w := do(s, "GET", "/volumecontent/a/path?path=/", bearer(a.Token), ""); w.Code != http.StatusBadRequest {
		t.Errorf("by name: %d %s", w.Code, w.Body)
	}
	// The error body is the content API's Error: code a string.
	w := do(s, "GET", url(a), nil, "")
	if e := decode[map[string]any](t, w); e["code"] != "401" || e["message"] == "" {
		t.Errorf("error body %v", e)
	}
}

func TestUnitVolumeContentRoutes(t *testing.T) {
	s, fake, st := newVolumeServer(t)
	v := createVol(t, s, testKey, "data")
	tok := bearer(v.Token)
	base := "/volumecontent/" + v.VolumeID

	w := do(s, "PUT", base+"/file?path=/dir/hello.txt", tok, "hello")
	if w.Code != http.StatusOK {
		t.Fatalf("write: %d %s", w.Code, w.Body)
	}
	e := decode[map[string]any](t, w)
	want := map[string]any{"name": "hello.txt", "type": "file", "path": "/dir/hello.txt", "size": 5.0, "mode": 420.0, "uid": 1000.0, "gid": 1000.0,
		"atime": "2026-01-02T03:04:05Z", "mtime": "2026-01-02T03:04:05Z", "ctime": "2026-01-02T03:04:05Z"}
	if len(e) != len(want) {
		t.Errorf("write answered %v, want %v", e, want)
	}
	for k, wv := range want {
		if e[k] != wv {
			t.Errorf("write answered %s=%v, want %v", k, e[k], wv)
		}
	}
	if st.overwrite {
		t.Error("a write without force overwrites")
	}
	if w := do(s, "PUT", base+"/file?path=/dir/hello.txt", tok, "again"); w.Code != http.StatusConflict {
		t.Errorf("a second write without force: %d %s", w.Code, w.Body)
	}
	if w := do(s, "PUT", base+"/file?path=/dir/hello.txt&force=true", tok, "hello!"); w.Code != http.StatusOK || !st.overwrite {
		t.Errorf("write with force: %d %s (overwrite %v)", w.Code, w.Body, st.overwrite)
	}
	if w := do(s, "PUT", base+"/file?path=/dir/hello.txt&force=maybe", tok, "x"); w.Code != http.StatusBadRequest {
		t.Errorf("force=maybe: %d %s", w.Code, w.Body)
	}

	w = do(s, "GET", base+"/file?path=dir/hello.txt", tok, "")
	if w.Code != http.StatusOK || w.Body.String() != "hello!" || w.Header().Get("Content-Length") != "6" || w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Errorf("read: %d %q %v", w.Code, w.Body, w.Header())
	}
	if w := do(s, "GET", base+"/file?path=/nope", tok, ""); w.Code != http.StatusNotFound {
		t.Errorf("read of a missing file: %d %s", w.Code, w.Body)
	}

	w = do(s, "GET", base+"/path?path=/dir/hello.txt", tok, "")
	if e := decode[e2bVolumeEntry](t, w); w.Code != http.StatusOK || e.Name != "hello.txt" || e.Size != 6 || e.Type != "file" {
		t.Errorf("stat: %d %+v", w.Code, e)
	}
	w = do(s, "GET", base+"/path?path=/", tok, "")
	if e := decode[e2bVolumeEntry](t, w); w.Code != http.StatusOK || e.Name != "/" || e.Path != "/" || e.Type != "directory" || e.Mode != 0o755 {
		t.Errorf("stat of the root: %d %+v", w.Code, e)
	}
	if w := do(s, "GET", base+"/path?path=/nope", tok, ""); w.Code != http.StatusNotFound {
		t.Errorf("stat of a missing path: %d %s (exists() needs 404)", w.Code, w.Body)
	}

	w = do(s, "POST", base+"/dir?path=/a/b&force=true", tok, "")
	if e := decode[e2bVolumeEntry](t, w); w.Code != http.StatusCreated || e.Path != "/a/b" || e.Type != "directory" || !st.parents {
		t.Errorf("makeDir: %d %+v (parents %v)", w.Code, e, st.parents)
	}
	if w := do(s, "POST", base+"/dir?path=/c", tok, ""); w.Code != http.StatusCreated || st.parents {
		t.Errorf("makeDir without force: %d %s (parents %v)", w.Code, w.Body, st.parents)
	}

	w = do(s, "GET", base+"/dir?path=/&depth=3", tok, "")
	list := decode[[]e2bVolumeEntry](t, w)
	var paths []string
	for _, e := range list {
		paths = append(paths, e.Path)
	}
	if w.Code != http.StatusOK || st.depth != 3 || !slices.Equal(paths, []string{"/a", "/a/b", "/c", "/dir/hello.txt"}) {
		t.Errorf("list: %d %v (depth %d)", w.Code, paths, st.depth)
	}
	if w := do(s, "GET", base+"/dir?path=/", tok, ""); w.Code != http.StatusOK || st.depth != 1 {
		t.Errorf("list without depth: %d (depth %d)", w.Code, st.depth)
	}
	for _, d := range []string{"0", "11", "x"} {
		if w := do(s, "GET", base+"/dir?path=/&depth="+d, tok, ""); w.Code != http.StatusBadRequest {
			t.Errorf("depth %s: %d %s", d, w.Code, w.Body)
		}
	}
	st.files[v.VolumeID] = map[string][]byte{}
	if w := do(s, "GET", base+"/dir?path=/", tok, ""); w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("an empty list: %d %q", w.Code, w.Body)
	}

	// Refused by the domain's path rules.
	for _, c := range []struct{ method, url string }{
		{"GET", base + "/file?path=/../etc/passwd"},
		{"PUT", base + "/file?path=/"},
		{"DELETE", base + "/path?path=/"},
		{"GET", base + "/path?path=a%00b"},
	} {
		if w := do(s, c.method, c.url, tok, "x"); w.Code != http.StatusBadRequest {
			t.Errorf("%s %s: %d %s", c.method, c.url, w.Code, w.Body)
		}
	}

	st.files[v.VolumeID]["gone"] = []byte("x")
	if w := do(s, "DELETE", base+"/path?path=/gone", tok, ""); w.Code != http.StatusNoContent || !st.recursive {
		t.Errorf("remove: %d %s (recursive %v)", w.Code, w.Body, st.recursive)
	}
	if w := do(s, "DELETE", base+"/path?path=/gone", tok, ""); w.Code != http.StatusNotFound {
		t.Errorf("remove again: %d %s", w.Code, w.Body)
	}

	// uid, gid and mode are set (after the file or directory is made); a
	// full st_mode loses its type bits; bad values are refused before the
	// domain's calls; PATCH without them is a stat.
	st.files[v.VolumeID]["f"] = []byte("x")
	u := func(n uint32) *uint32 { return &n }
	m := func(n fs.FileMode) *fs.FileMode { return &n }
	for _, c := range []struct {
		method, url, body string
		want              core.FileAttributes
	}{
		{"POST", base + "/dir?path=/d&mode=493", "", core.FileAttributes{Mode: m(0o755)}},
		{"PUT", base + "/file?path=/f2&uid=0", "x", core.FileAttributes{UID: u(0)}},
		{"PATCH", base + "/path?path=/f", `{"mode":33188}`, core.FileAttributes{Mode: m(0o644)}}, // 0o100644
		{"PATCH", base + "/path?path=/f", `{"uid":0,"gid":1000,"mode":1023}`, core.FileAttributes{UID: u(0), GID: u(1000), Mode: m(0o777 | fs.ModeSticky)}},
	} {
		st.attrs = nil
		w := do(s, c.method, c.url, tok, c.body)
		if w.Code/100 != 2 || len(st.attrs) != 1 || !reflect.DeepEqual(st.attrs[0], c.want) {
			t.Errorf("%s %s %s: %d %s; the domain was asked for %+v, want %+v", c.method, c.url, c.body, w.Code, w.Body, st.attrs, c.want)
		}
	}
	calls := len(fake.Calls())
	for _, c := range []struct{ method, url, body, want string }{
		{"PATCH", base + "/path?path=/f", `{"uid":-1}`, "uid -1"},
		{"PATCH", base + "/path?path=/f", `{"gid":70000}`, "gid 70000"},
		{"PATCH", base + "/path?path=/f", `{"mode":2541}`, "setuid"}, // 0o4755
		{"POST", base + "/dir?path=/e&uid=x", "", "uid"},
		{"PUT", base + "/file?path=/f3&mode=99999", "x", "mode"},
	} {
		w := do(s, c.method, c.url, tok, c.body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s %s %s: %d %s; want 400 naming %q", c.method, c.url, c.body, w.Code, w.Body, c.want)
		}
	}
	for _, c := range fake.Calls()[calls:] {
		if c != "GetVolume" {
			t.Errorf("a refused request reached the domain's %s", c)
		}
	}
	if w := do(s, "PATCH", base+"/path?path=/f", tok, `{}`); w.Code != http.StatusOK || decode[e2bVolumeEntry](t, w).Path != "/f" {
		t.Errorf("PATCH {}: %d %s", w.Code, w.Body)
	}
	if w := do(s, "PATCH", base+"/path?path=/f", tok, `{"mode":"x"}`); w.Code != http.StatusBadRequest {
		t.Errorf("PATCH of a bad body: %d %s", w.Code, w.Body)
	}
	if w := do(s, "PATCH", base+"/path?path=/f", tok, `{"x":"`+strings.Repeat("a", maxControlBody)+`"}`); w.Code != http.StatusRequestEntityTooLarge && w.Code != http.StatusBadRequest {
		t.Errorf("PATCH of a body past the bound: %d %.200s", w.Code, w.Body)
	}
}

// Names come from sandboxes: invalid UTF-8, control characters, quotes and
// markup come back as valid JSON, invalid bytes replaced.
func TestUnitVolumeHostileNames(t *testing.T) {
	s, _, st := newVolumeServer(t)
	v := createVol(t, s, testKey, "data")
	hostile := []string{"bad\xff\xfename", "new\nline\r\x00", `quo"te\`, "<img src=x onerror=alert(1)>", "\u2028sep", "x\x1b[31mred"}
	for _, n := range hostile {
		st.files[v.VolumeID][n] = []byte("x")
	}
	w := do(s, "GET", "/volumecontent/"+v.VolumeID+"/dir?path=/", bearer(v.Token), "")
	if w.Code != http.StatusOK {
		t.Fatalf("list: %d %s", w.Code, w.Body)
	}
	if !json.Valid(w.Body.Bytes()) {
		t.Fatalf("the answer is not clean JSON: %q", w.Body)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(w.Body.Bytes()), []byte("\n")) {
		if bytes.ContainsAny(line, "\r\x00\x1b") {
			t.Errorf("a raw control character in the answer: %q", line)
		}
	}
	list := decode[[]e2bVolumeEntry](t, w)
	if len(list) != len(hostile) {
		t.Fatalf("listed %d entries, want %d", len(list), len(hostile))
	}
	got := map[string]bool{}
	for _, e := range list {
		if !utf8.ValidString(e.Name) || !utf8.ValidString(e.Path) || e.Path != "/"+e.Name {
			t.Errorf("entry %+v", e)
		}
		got[e.Name] = true
	}
	for _, n := range hostile {
		if want := strings.ToValidUTF8(n, "\uFFFD"); !got[want] {
			t.Errorf("name %q not listed as %q (got %v)", n, want, got)
		}
	}
	// A hostile path in a request is the domain's to refuse, echoed bounded.
	w = do(s, "GET", "/volumecontent/"+v.VolumeID+"/path?path=/"+strings.Repeat("..%2F", 2000)+"x", bearer(v.Token), "")
	if w.Code != http.StatusBadRequest || w.Body.Len() > 2048 {
		t.Errorf("a long hostile path: %d, %d bytes", w.Code, w.Body.Len())
	}
}

// Writes and reads stream: the domain sees the first bytes of an upload
// before the client sends the rest, and the client gets the first bytes of
// a download before the domain gives the rest.
func TestUnitVolumeStreaming(t *testing.T) {
	s, fake, _ := newVolumeServer(t)
	v := createVol(t, s, testKey, "data")
	srv := httptest.NewServer(s)
	defer srv.Close()
	url := srv.URL + "/volumecontent/" + v.VolumeID + "/file?path=/big"

	gotFirst := make(chan []byte, 1)
	fake.VolumeUploadFunc = func(ctx context.Context, ref, p string, r io.Reader, overwrite bool) (core.FileInfo, error) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r, buf); err != nil {
			return core.FileInfo{}, err
		}
		gotFirst <- buf
		n, err := io.Copy(io.Discard, r)
		return core.FileInfo{Path: p, Size: n + 5, Type: core.FileRegular}, err
	}
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("PUT", url, pr)
	req.Header.Set("Authorization", "Bearer "+v.Token)
	req.Header.Set("Content-Type", "application/octet-stream")
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	if _, err := pw.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-gotFirst:
		if string(b) != "first" {
			t.Errorf("the domain got %q first", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the domain did not get the upload's first bytes before its end")
	}
	pw.Write(bytes.Repeat([]byte("x"), 1<<20))
	pw.Close()
	resp := <-done
	if resp == nil {
		t.FailNow()
	}
	var e e2bVolumeEntry
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || e.Size != 5+1<<20 {
		t.Errorf("upload: %d %+v", resp.StatusCode, e)
	}

	rest := make(chan struct{})
	dr, dw := io.Pipe()
	fake.VolumeDownloadFunc = func(ctx context.Context, ref, p string) (io.ReadCloser, core.FileInfo, error) {
		go func() {
			dw.Write(bytes.Repeat([]byte("a"), 64<<10))
			<-rest
			dw.Write([]byte("end"))
			dw.Close()
		}()
		return dr, core.FileInfo{Path: p, Size: 64<<10 + 3, Type: core.FileRegular}, nil
	}
	req, _ = http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+v.Token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatalf("the first bytes of the download did not come before the rest: %v", err)
	}
	close(rest)
	tail, _ := io.ReadAll(resp.Body)
	if string(tail) != "end" || resp.Header.Get("Content-Length") != "65539" {
		t.Errorf("download's tail %q, length %s", tail, resp.Header.Get("Content-Length"))
	}
}

func TestUnitCreateWithVolumeMounts(t *testing.T) {
	s, fake, st := newVolumeServer(t)
	v := createVol(t, s, testKey, "data")
	var got core.Options
	var sb core.Sandbox
	fake.AcquireFunc = func(ctx context.Context, user string, opts core.Options) (core.AcquireResult, error) {
		got = opts
		sb = core.Sandbox{ID: "sb-aaaaaaaaaaaaaaaaaaaa", Tenant: core.CallerOf(ctx).Tenant, UserID: user, State: core.StateRunning, Metadata: opts.Metadata}
		for _, m := range opts.Volumes {
			vol, err := st.lockedFind(ctx, m.Volume)
			if err != nil {
				return core.AcquireResult{}, err
			}
			m.Volume = vol.ID
			sb.Volumes = append(sb.Volumes, m)
		}
		return core.AcquireResult{Sandbox: sb, Created: true}, nil
	}
	fake.GetFunc = func(ctx context.Context, id string) (core.Sandbox, error) {
		if id != sb.ID {
			return core.Sandbox{}, core.Errorf(core.ErrNotFound, "no %s", id)
		}
		return sb, nil
	}
	fake.ListFunc = func(ctx context.Context, f core.ListFilter) ([]core.Sandbox, error) { return []core.Sandbox{sb}, nil }

	w := do(s, "POST", "/v2/sandboxes", key(testKey), `{"templateID":"base","volumeMounts":[{"name":"data","path":"/mnt/data"},{"name":"data","path":"/data/x"}]}`)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "twice") {
		t.Errorf("one volume twice: %d %s", w.Code, w.Body)
	}
	w = do(s, "POST", "/v2/sandboxes", key(testKey), `{"templateID":"base","volumeMounts":[{"name":"data","path":"/mnt/data"}]}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	if want := []core.VolumeMount{{Volume: "data", Path: "/mnt/data"}}; !slices.Equal(got.Volumes, want) {
		t.Errorf("acquired with volumes %+v, want %+v", got.Volumes, want)
	}
	w = do(s, "GET", "/sandboxes/"+sb.ID, key(testKey), "")
	if info := decode[map[string]any](t, w); w.Code != http.StatusOK || !jsonEqual(info["volumeMounts"], `[{"name":"data","path":"/mnt/data"}]`) {
		t.Errorf("info: %d volumeMounts %v", w.Code, info["volumeMounts"])
	}
	w = do(s, "GET", "/v2/sandboxes", key(testKey), "")
	if list := decode[[]map[string]any](t, w); w.Code != http.StatusOK || len(list) != 1 || !jsonEqual(list[0]["volumeMounts"], `[{"name":"data","path":"/mnt/data"}]`) {
		t.Errorf("list: %d %v", w.Code, list)
	}
	// A volume deleted (by force) since shows its ID.
	delete(st.vols, v.VolumeID)
	w = do(s, "GET", "/sandboxes/"+sb.ID, key(testKey), "")
	if info := decode[map[string]any](t, w); !jsonEqual(info["volumeMounts"], `[{"name":"`+v.VolumeID+`","path":"/mnt/data"}]`) {
		t.Errorf("info after the volume went: %v", info["volumeMounts"])
	}
	// A sandbox without volumes lists none (an empty list, not null), and
	// does not look volumes up.
	sb.Volumes = nil
	calls := len(fake.Calls())
	w = do(s, "GET", "/sandboxes/"+sb.ID, key(testKey), "")
	if info := decode[map[string]any](t, w); !jsonEqual(info["volumeMounts"], `[]`) {
		t.Errorf("info without volumes: %v", info["volumeMounts"])
	}
	if slices.Contains(fake.Calls()[calls:], "ListVolumes") {
		t.Error("volumes looked up for a sandbox without any")
	}

	for name, body := range map[string]string{
		"a path outside /mnt and /data": `{"volumeMounts":[{"name":"data","path":"/workspace/x"}]}`,
		"no name":                       `{"volumeMounts":[{"path":"/mnt/x"}]}`,
		"a null mount":                  `{"volumeMounts":[null]}`,
		"not a list":                    `{"volumeMounts":{"name":"data"}}`,
		"too many":                      `{"volumeMounts":[` + strings.Repeat(`{"name":"d","path":"/mnt/d"},`, maxVolumeMountsBody) + `{}]}`,
		"nine":                          `{"volumeMounts":[` + nineMounts() + `]}`,
	} {
		if w := do(s, "POST", "/v2/sandboxes", key(testKey), body); w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, w.Code, w.Body)
		}
	}
	var missing error
	fake.AcquireFunc = func(ctx context.Context, user string, opts core.Options) (core.AcquireResult, error) {
		missing = core.VolumeNotFound(opts.Volumes[0].Volume)
		return core.AcquireResult{}, missing
	}
	if w := do(s, "POST", "/v2/sandboxes", key(testKey), `{"volumeMounts":[{"name":"nope","path":"/mnt/x"}]}`); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "volume nope not found") {
		t.Errorf("a missing volume: %d %s", w.Code, w.Body)
	}
	if !errors.Is(missing, core.ErrNotFound) {
		t.Errorf("VolumeNotFound is not ErrNotFound: %v", missing)
	}
}

func nineMounts() string {
	var ms []string
	for i := range 9 {
		n := string(rune('a' + i))
		ms = append(ms, `{"name":"`+n+`","path":"/mnt/`+n+`"}`)
	}
	return strings.Join(ms, ",")
}

func jsonEqual(v any, want string) bool {
	b, _ := json.Marshal(v)
	var w any
	json.Unmarshal([]byte(want), &w)
	wb, _ := json.Marshal(w)
	return bytes.Equal(b, wb)
}
