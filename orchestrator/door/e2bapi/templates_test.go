package e2bapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// The template routes' tests run the door over coretest's fake behind the
// domain's validating layer, its template calls scripted by tplStore: an
// in-memory store of templates, their versions and build logs, and the
// tenants' archives.

// tplBuild is one scripted build: its log's lines, revealed two per
// TemplateBuildLog call, and how it ends once all are.
type tplBuild struct {
	spec   core.TemplateSpec
	force  bool
	lines  []string
	shown  int
	state  core.TemplateState
	reason string
}

type tplStore struct {
	mu        sync.Mutex
	templates map[string]*core.Template        // ID → template
	builds    map[string]map[int]*tplBuild     // ID → version → build
	files     map[string]map[string][]byte     // tenant → key → archive
	logCalls  []string                         // "ref/version/after/limit"
	script    func(core.TemplateSpec) tplBuild // how a build goes (nil: two lines, ready)
	acquired  []core.Options
	deleted   []string
}

func newTplStore() *tplStore {
	return &tplStore{templates: map[string]*core.Template{}, builds: map[string]map[int]*tplBuild{}, files: map[string]map[string][]byte{}}
}

func (st *tplStore) find(ctx context.Context, ref string) (*core.Template, error) {
	c := core.CallerOf(ctx)
	for _, t := range st.templates {
		if (t.ID == ref || t.Name == ref) && (c.Admin || t.Tenant == c.Tenant) {
			return t, nil
		}
	}
	return nil, core.TemplateNotFound(ref)
}

func (st *tplStore) install(m *coretest.Manager) {
	m.PutTemplateFileFunc = func(ctx context.Context, key string, r io.Reader) (bool, error) {
		tenant := core.CallerOf(ctx).Tenant
		st.mu.Lock()
		_, ok := st.files[tenant][key]
		st.mu.Unlock()
		if ok {
			return true, nil
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return false, err
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.files[tenant] == nil {
			st.files[tenant] = map[string][]byte{}
		}
		st.files[tenant][key] = b
		return false, nil
	}
	m.HasTemplateFileFunc = func(ctx context.Context, key string) (bool, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		_, ok := st.files[core.CallerOf(ctx).Tenant][key]
		return ok, nil
	}
	m.BuildTemplateFunc = func(ctx context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, a := range spec.Archives() {
			if _, ok := st.files[core.CallerOf(ctx).Tenant][a]; !ok {
				return core.Template{}, core.TemplateVersion{}, core.Preconditionf("archive %s was not uploaded", a)
			}
		}
		t, err := st.find(ctx, name)
		if err != nil {
			t = &core.Template{ID: core.NewTemplateID(), Name: name, Tenant: core.CallerOf(ctx).Tenant, CreatedAt: time.Now()}
			st.templates[t.ID] = t
			st.builds[t.ID] = map[int]*tplBuild{}
		}
		for _, v := range t.Versions {
			if v.State == core.TemplateBuilding {
				return core.Template{}, core.TemplateVersion{}, core.Preconditionf("template %s is being built", name)
			}
		}
		b := tplBuild{lines: []string{"Step 1/2 : FROM sandbox", "Step 2/2 : RUN it", "built"}, state: core.TemplateReady}
		if st.script != nil {
			b = st.script(spec)
		}
		b.spec, b.force = spec, force
		v := core.TemplateVersion{Version: len(t.Versions) + 1, SpecHash: spec.SpecHash("img"), State: core.TemplateBuilding, StartedAt: time.Now()}
		t.Versions = append(t.Versions, v)
		st.builds[t.ID][v.Version] = &b
		return *t, v, nil
	}
	m.TemplateBuildLogFunc = func(ctx context.Context, ref string, version int, afterSeq int64, limit int) ([]core.TemplateBuildEvent, core.TemplateVersion, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.logCalls = append(st.logCalls, fmt.Sprintf("%s/%d/%d/%d", ref, version, afterSeq, limit))
		t, err := st.find(ctx, ref)
		if err != nil {
			return nil, core.TemplateVersion{}, err
		}
		b := st.builds[t.ID][version]
		if b == nil {
			return nil, core.TemplateVersion{}, core.NotFoundf("template %s has no version %d", ref, version)
		}
		b.shown = min(b.shown+2, len(b.lines))
		vi := slices.IndexFunc(t.Versions, func(v core.TemplateVersion) bool { return v.Version == version })
		if b.shown == len(b.lines) && t.Versions[vi].State == core.TemplateBuilding {
			t.Versions[vi].State, t.Versions[vi].Reason, t.Versions[vi].FinishedAt = b.state, b.reason, time.Now()
		}
		var evs []core.TemplateBuildEvent
		for i := afterSeq; i < int64(b.shown) && len(evs) < limit; i++ {
			evs = append(evs, core.TemplateBuildEvent{Seq: i + 1, Time: time.Unix(1700000000+i, 0), Line: b.lines[i]})
		}
		return evs, t.Versions[vi], nil
	}
	m.GetTemplateFunc = func(ctx context.Context, ref string) (core.Template, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		t, err := st.find(ctx, ref)
		if err != nil {
			return core.Template{}, err
		}
		return *t, nil
	}
	m.ListTemplatesFunc = func(ctx context.Context, tenant string) ([]core.Template, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		var out []core.Template
		for _, t := range st.templates {
			if t.Tenant == core.CallerOf(ctx).Tenant {
				out = append(out, *t)
			}
		}
		slices.SortFunc(out, func(a, b core.Template) int { return strings.Compare(a.Name, b.Name) })
		return out, nil
	}
	m.DeleteTemplateFunc = func(ctx context.Context, ref string) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		t, err := st.find(ctx, ref)
		if err != nil {
			return err
		}
		st.deleted = append(st.deleted, t.ID)
		delete(st.templates, t.ID)
		return nil
	}
	m.DeleteSnapshotFunc = func(ctx context.Context, ref string) error { return core.SnapshotNotFound(ref) }
	m.AcquireFunc = func(ctx context.Context, userID string, opts core.Options) (core.AcquireResult, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.acquired = append(st.acquired, opts)
		sb := core.Sandbox{ID: "sb-aaaaaaaaaaaaaaaaaaaa", Tenant: core.CallerOf(ctx).Tenant, UserID: userID, State: core.StateRunning,
			Metadata: opts.Metadata, CreatedAt: time.Now()}
		if opts.Template != "" {
			t, err := st.find(ctx, opts.Template)
			if err != nil {
				return core.AcquireResult{}, err
			}
			sb.Template, sb.TemplateVersion = t.ID, len(t.Versions)
		}
		if opts.FromSnapshot != "" {
			return core.AcquireResult{}, core.SnapshotNotFound(opts.FromSnapshot)
		}
		return core.AcquireResult{Sandbox: sb}, nil
	}
}

const tplSecret = "0123456789abcdef0123456789abcdef"

// newTemplateServer is a door over the fake with two tenants' keys:
// testKey is acme's, otherTestKey beta's.
func newTemplateServer(t *testing.T, st *tplStore) *Server {
	t.Helper()
	toks, err := tokens.Parse(strings.NewReader(testKey + " acme user\n" + otherTestKey + " beta user\n"))
	if err != nil {
		t.Fatal(err)
	}
	fake := &coretest.Manager{}
	st.install(fake)
	s, err := New(coretest.Validated(fake), Config{Tokens: toks, Secret: []byte(tplSecret)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const hashA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// requestBuildOf asks for a build of name and returns its answer.
func requestBuildOf(t *testing.T, s *Server, k, name string) e2bTemplateRequested {
	t.Helper()
	w := do(s, "POST", "/v3/templates", key(k), `{"name":"`+name+`","cpuCount":2,"memoryMB":1024}`)
	if w.Code != http.StatusAccepted {
		t.Fatalf("request build %s: %d %s", name, w.Code, w.Body)
	}
	return decode[e2bTemplateRequested](t, w)
}

func TestTemplateRoutesNeedAKey(t *testing.T) {
	s := newTemplateServer(t, newTplStore())
	id := uuid.NewString()
	for _, r := range [][2]string{
		{"POST", "/v3/templates"}, {"GET", "/templates"}, {"GET", "/templates/t1"}, {"GET", "/templates/aliases/t1"},
		{"GET", "/templates/t1/tags"}, {"GET", "/templates/t1/files/" + hashA}, {"POST", "/v2/templates/t1/builds/" + id},
		{"GET", "/templates/t1/builds/" + id + "/status"}, {"DELETE", "/templates/t1"}, {"POST", "/templates/tags"},
	} {
		if w := do(s, r[0], r[1], nil, `{}`); w.Code != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d %s", r[0], r[1], w.Code, w.Body)
		}
	}
}

func TestTemplateRequestBuild(t *testing.T) {
	s := newTemplateServer(t, newTplStore())
	got := requestBuildOf(t, s, testKey, "my-env")
	if got.TemplateID != "my-env" || uuid.Validate(got.BuildID) != nil || !reflect.DeepEqual(got.Names, []string{"my-env"}) ||
		!reflect.DeepEqual(got.Tags, []string{"default"}) || !reflect.DeepEqual(got.Aliases, []string{"my-env"}) || got.Public {
		t.Errorf("answer %+v", got)
	}
	if again := requestBuildOf(t, s, testKey, "my-env:default"); again.TemplateID != "my-env" || again.BuildID == got.BuildID {
		t.Errorf("name:default: %+v", again)
	}
	for body, want := range map[string]string{
		`{"name":"my-env:v1"}`:                       "tags are not supported",
		`{"name":"my-env","tags":["prod"]}`:          `prod\": tags are not supported`,
		`{"name":"bad name"}`:                        "template name",
		`{}`:                                         "a name is required",
		`{"name":"tpl-aaaaaaaaaaaaaaaaaaaa"}`:        "not found", // an ID must be the caller's
		`{"alias":"old-style","tags":["default"]}`:   "",
		`{"name":"x","cpuCount":"many"}`:             "cpuCount must be a number",
		`{"name":"x","tags":"default"}`:              "tags must be an array",
		`{"name":"` + strings.Repeat("n", 65) + `"}`: "template name",
	} {
		w := do(s, "POST", "/v3/templates", key(testKey), body)
		switch {
		case want == "" && w.Code != http.StatusAccepted:
			t.Errorf("%s: %d %s", body, w.Code, w.Body)
		case want != "" && (w.Code/100 != 4 || !strings.Contains(w.Body.String(), want)):
			t.Errorf("%s: %d %s, want 4xx saying %q", body, w.Code, w.Body, want)
		}
	}
}

func TestTemplateFileUpload(t *testing.T) {
	st := newTplStore()
	s := newTemplateServer(t, st)
	srv := httptest.NewServer(s)
	defer srv.Close()
	link := func(k, tpl, hash string) (int, e2bFileUpload) {
		w := do(s, "GET", "/templates/"+tpl+"/files/"+hash, key(k), "")
		if w.Code != http.StatusOK {
			return w.Code, e2bFileUpload{}
		}
		return w.Code, decode[e2bFileUpload](t, w)
	}
	code, up := link(testKey, "new-env", hashA)
	if code != http.StatusOK || up.Present {
		t.Fatalf("link: %d %+v", code, up)
	}
	u, err := url.Parse(up.URL)
	if err != nil || !u.IsAbs() || u.Path != "/templatefiles/"+hashA || u.Query().Get("token") == "" {
		t.Fatalf("upload URL %q: want an absolute URL of this door's, with a token", up.URL)
	}
	put := func(rawURL, body string) int {
		r, _ := http.NewRequest("PUT", strings.Replace(rawURL, "http://"+u.Host, srv.URL, 1), strings.NewReader(body))
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := put(up.URL, "tar bytes"); c != http.StatusOK {
		t.Fatalf("PUT: %d", c)
	}
	if got := string(st.files["acme"][hashA]); got != "tar bytes" {
		t.Errorf("stored %q", got)
	}
	// Again (forceUpload): the domain keeps the first, the body is read
	// to its end all the same.
	if c := put(up.URL, strings.Repeat("x", 4<<20)); c != http.StatusOK {
		t.Fatalf("second PUT: %d", c)
	}
	if got := string(st.files["acme"][hashA]); got != "tar bytes" {
		t.Errorf("after the second PUT, stored %q", got)
	}
	if _, up2 := link(testKey, "new-env", hashA); !up2.Present {
		t.Errorf("after the upload, present = false")
	}
	// The archive is acme's: beta has none under that key.
	if _, up3 := link(otherTestKey, "new-env", hashA); up3.Present {
		t.Errorf("beta sees acme's archive")
	}
	// Tokens: missing, wrong, for another key, expired, tampered tenant.
	hashB := strings.Repeat("b", 64)
	bad := []string{
		srv.URL + "/templatefiles/" + hashA,
		srv.URL + "/templatefiles/" + hashA + "?token=x.1.y",
		strings.Replace(up.URL, hashA, hashB, 1),
		srv.URL + "/templatefiles/" + hashA + "?token=" + s.uploadToken("acme", hashA, time.Now().Add(-time.Minute)),
		srv.URL + "/templatefiles/" + hashA + "?token=" + strings.Replace(u.Query().Get("token"), "YWNtZQ", "YmV0YQ", 1), // beta
	}
	for _, b := range bad {
		if c := put(b, "evil"); c != http.StatusUnauthorized {
			t.Errorf("PUT %s: %d, want 401", b, c)
		}
	}
	if _, ok := st.files["beta"]; ok {
		t.Errorf("a bad token stored an archive for beta")
	}
	if c, _ := link(testKey, "new-env", "not-a-hash"); c != http.StatusBadRequest {
		t.Errorf("bad hash: %d", c)
	}
	if c, _ := link(testKey, "tpl-aaaaaaaaaaaaaaaaaaaa", hashA); c != http.StatusNotFound {
		t.Errorf("unknown template ID: %d", c)
	}
}

// TestTemplateSpecTranslation is the table of E2B's steps to the domain's.
func TestTemplateSpecTranslation(t *testing.T) {
	step := func(typ string, args ...string) e2bStep { return e2bStep{Type: typ, Args: args} }
	copyStep := func(args ...string) e2bStep { return e2bStep{Type: "COPY", Args: args, FilesHash: hashA} }
	tr := true
	cases := []struct {
		name   string
		in     buildStart
		want   core.TemplateSpec
		stepOf []int
		err    string
	}{
		{name: "base image, run", in: buildStart{FromImage: "e2bdev/base", Steps: []e2bStep{step("RUN", "echo hi")}},
			want: core.TemplateSpec{Steps: []core.TemplateStep{{Run: "echo hi"}}}, stepOf: []int{1}},
		{name: "aptInstall is an Apt step", in: buildStart{FromImage: "e2bdev/base", Steps: []e2bStep{
			step("RUN", "apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y jq curl", "root"),
			step("RUN", "apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y --no-install-recommends --fix-missing git", "root")}},
			want: core.TemplateSpec{Steps: []core.TemplateStep{{Apt: []string{"jq", "curl"}}, {Apt: []string{"git"}}}}, stepOf: []int{1, 2}},
		{name: "a run's user holds for it alone", in: buildStart{FromTemplate: "base", Steps: []e2bStep{
			step("RUN", "a", "user"), step("RUN", "b"), step("USER", "user"), step("RUN", "c"), step("RUN", "d", "root"), step("RUN", "e", "")}},
			want: core.TemplateSpec{Steps: []core.TemplateStep{{User: "sandbox"}, {Run: "a"}, {User: "root"}, {Run: "b"},
				{User: "sandbox"}, {Run: "c"}, {User: "root"}, {Run: "d"}, {User: "sandbox"}, {Run: "e"}}},
			stepOf: []int{1, 1, 2, 2, 4, 4, 5, 5, 6, 6}},
		{name: "copy, mode in octal, owner", in: buildStart{Steps: []e2bStep{
			copyStep("file.txt", "/opt/t/", "", ""), copyStep("./conf", "/etc/app", "user", "0640"), step("USER", "user"), copyStep("x", "/opt/x", "", "755"), copyStep("dir/", "/opt/d/"), copyStep(".", "/opt/all")}},
			want: core.TemplateSpec{Steps: []core.TemplateStep{
				{Copy: &core.TemplateCopy{Archive: hashA, Src: "file.txt", Dest: "/opt/t/"}},
				{Copy: &core.TemplateCopy{Archive: hashA, Src: "conf", Dest: "/etc/app", Mode: 0o640, Owner: "sandbox"}},
				{Copy: &core.TemplateCopy{Archive: hashA, Src: "x", Dest: "/opt/x", Mode: 0o755, Owner: "sandbox"}},
				{Copy: &core.TemplateCopy{Archive: hashA, Src: "dir", Dest: "/opt/d/", Owner: "sandbox"}},
				{Copy: &core.TemplateCopy{Archive: hashA, Src: ".", Dest: "/opt/all", Owner: "sandbox"}}}},
			stepOf: []int{1, 2, 4, 5, 6}},
		{name: "env, workdir", in: buildStart{FromTemplate: "code-interpreter-v1:default", Steps: []e2bStep{step("ENV", "A", "1", "B", "two words"), step("WORKDIR", "/opt/app")}},
			want: core.TemplateSpec{Steps: []core.TemplateStep{{Env: map[string]string{"A": "1", "B": "two words"}}, {Workdir: "/opt/app"}}}, stepOf: []int{1, 2}},
		{name: "the base image's latest tag", in: buildStart{FromImage: "e2bdev/base:latest", Steps: []e2bStep{step("RUN", "x")}},
			want: core.TemplateSpec{Steps: []core.TemplateStep{{Run: "x"}}}, stepOf: []int{1}},
		{name: "another template as base", in: buildStart{FromTemplate: "my-base", Steps: []e2bStep{step("RUN", "x")}},
			want: core.TemplateSpec{Base: "my-base", Steps: []core.TemplateStep{{Run: "x"}}}, stepOf: []int{1}},
		{name: "another template's default tag", in: buildStart{FromTemplate: "my-base:default", Steps: []e2bStep{step("RUN", "x")}},
			want: core.TemplateSpec{Base: "my-base", Steps: []core.TemplateStep{{Run: "x"}}}, stepOf: []int{1}},
		{name: "registry image", in: buildStart{FromImage: "python:3", Steps: []e2bStep{step("RUN", "x")}},
			err: `fromImage "python:3": sandboxd builds templates offline and pulls no image from a registry`},
		{name: "registry credentials", in: buildStart{FromImage: "e2bdev/base", FromImageRegistry: true, Steps: []e2bStep{step("RUN", "x")}},
			err: "uses no registry"},
		{name: "start command", in: buildStart{StartCmd: "python app.py", Steps: []e2bStep{step("RUN", "x")}}, err: "startCmd: a start command is not supported"},
		{name: "ready command", in: buildStart{ReadyCmd: "sleep 20", Steps: []e2bStep{step("RUN", "x")}}, err: "readyCmd: a ready command is not supported"},
		{name: "glob", in: buildStart{Steps: []e2bStep{copyStep("*.txt", "/opt/")}}, err: `source "*.txt" is a pattern`},
		{name: "bad mode", in: buildStart{Steps: []e2bStep{copyStep("a", "/opt/", "", "0999")}}, err: `mode "0999"`},
		{name: "copy without hash", in: buildStart{Steps: []e2bStep{step("COPY", "a", "/opt/")}}, err: "filesHash is missing"},
		{name: "unknown user", in: buildStart{Steps: []e2bStep{step("RUN", "x", "www-data")}}, err: `user "www-data": sandboxd's templates have two users`},
		{name: "odd env", in: buildStart{Steps: []e2bStep{step("ENV", "A")}}, err: "want args [name, value"},
		{name: "unknown step", in: buildStart{Steps: []e2bStep{step("ARG", "x")}}, err: `step type "ARG" is not supported`},
		{name: "no steps", in: buildStart{FromImage: "e2bdev/base"}, err: "no steps"},
		{name: "only a user", in: buildStart{Steps: []e2bStep{step("USER", "root")}}, err: "no steps"},
	}
	for _, c := range cases {
		spec, stepOf, err := templateSpec(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.name, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !reflect.DeepEqual(spec, c.want) || !reflect.DeepEqual(stepOf, c.stepOf):
			t.Errorf("%s:\n got %+v %v\nwant %+v %v", c.name, spec, stepOf, c.want, c.stepOf)
		}
	}
	if forceOf(buildStart{}) || !forceOf(buildStart{Force: &tr}) || !forceOf(buildStart{Steps: []e2bStep{{Type: "RUN", Force: &tr}}}) {
		t.Errorf("forceOf")
	}
}

// statusOf polls a build's status once.
func statusOf(t *testing.T, s *Server, k, tpl, build string, offset int) (int, e2bBuildInfo) {
	t.Helper()
	w := do(s, "GET", fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d", tpl, build, offset), key(k), "")
	if w.Code != http.StatusOK {
		return w.Code, e2bBuildInfo{}
	}
	return w.Code, decode[e2bBuildInfo](t, w)
}

// pollBuild polls as the SDK's waitForBuildFinish does, returning the
// lines and the last status.
func pollBuild(t *testing.T, s *Server, k, tpl, build string) ([]string, e2bBuildInfo) {
	t.Helper()
	var lines []string
	for i := 0; i < 50; i++ {
		code, info := statusOf(t, s, k, tpl, build, len(lines))
		if code != http.StatusOK {
			t.Fatalf("status: %d", code)
		}
		for _, e := range info.LogEntries {
			lines = append(lines, e.Message)
		}
		if (info.Status == "ready" || info.Status == "error") && len(info.LogEntries) == 0 {
			return lines, info
		}
	}
	t.Fatal("the build did not finish")
	return nil, e2bBuildInfo{}
}

func TestTemplateBuildAndStatus(t *testing.T) {
	st := newTplStore()
	s := newTemplateServer(t, st)
	req := requestBuildOf(t, s, testKey, "my-env")
	// Requested, not started: waiting.
	if code, info := statusOf(t, s, testKey, "my-env", req.BuildID, 0); code != http.StatusOK || info.Status != "waiting" || info.LogEntries == nil {
		t.Fatalf("before start: %d %+v", code, info)
	}
	// A COPY of an archive not uploaded fails in the domain (409 here).
	body := `{"fromImage":"e2bdev/base","force":false,"steps":[
		{"type":"COPY","args":["file.txt","/opt/t/","",""],"filesHash":"` + hashA + `","force":false},
		{"type":"ENV","args":["A","1"]},
		{"type":"RUN","args":["echo hi > /opt/t/hi"]}]}`
	if w := do(s, "POST", "/v2/templates/my-env/builds/"+req.BuildID, key(testKey), body); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "not uploaded") {
		t.Fatalf("start without the archive: %d %s", w.Code, w.Body)
	}
	st.files["acme"] = map[string][]byte{hashA: []byte("tar")}
	// Another tenant cannot start acme's build.
	if w := do(s, "POST", "/v2/templates/my-env/builds/"+req.BuildID, key(otherTestKey), body); w.Code != http.StatusNotFound {
		t.Fatalf("beta starts acme's build: %d %s", w.Code, w.Body)
	}
	if w := do(s, "POST", "/v2/templates/my-env/builds/"+req.BuildID, key(testKey), body); w.Code != http.StatusAccepted {
		t.Fatalf("start: %d %s", w.Code, w.Body)
	}
	var tid string
	for id := range st.templates {
		tid = id
	}
	b := st.builds[tid][1]
	want := core.TemplateSpec{Steps: []core.TemplateStep{{Copy: &core.TemplateCopy{Archive: hashA, Src: "file.txt", Dest: "/opt/t/"}},
		{Env: map[string]string{"A": "1"}}, {Run: "echo hi > /opt/t/hi"}}}
	if !reflect.DeepEqual(b.spec, want) || b.force {
		t.Errorf("built %+v force %v", b.spec, b.force)
	}
	// Started once: a second start of the same build is refused.
	if w := do(s, "POST", "/v2/templates/my-env/builds/"+req.BuildID, key(testKey), body); w.Code != http.StatusBadRequest {
		t.Errorf("second start: %d %s", w.Code, w.Body)
	}
	// Beta sees nothing of it.
	if code, _ := statusOf(t, s, otherTestKey, "my-env", req.BuildID, 0); code != http.StatusNotFound {
		t.Errorf("beta's status poll: %d", code)
	}
	lines, info := pollBuild(t, s, testKey, "my-env", req.BuildID)
	if !reflect.DeepEqual(lines, []string{"Step 1/2 : FROM sandbox", "Step 2/2 : RUN it", "built"}) || info.Status != "ready" || info.Reason != nil ||
		info.TemplateID != "my-env" || info.BuildID != req.BuildID {
		t.Errorf("lines %q, last %+v", lines, info)
	}
	// The log is read by the template's ID, after the offset given.
	if c := st.logCalls[len(st.logCalls)-1]; c != fmt.Sprintf("%s/1/3/%d", tid, core.MaxTemplateLogPage) {
		t.Errorf("last TemplateBuildLog call %s", c)
	}
	if code, info := statusOf(t, s, testKey, "my-env", req.BuildID, 1); code != http.StatusOK || len(info.LogEntries) != 2 || info.LogEntries[0].Message != "Step 2/2 : RUN it" ||
		info.LogEntries[0].Level != "info" || info.Logs[1] != "built" || info.LogEntries[0].Timestamp.IsZero() {
		t.Errorf("offset 1: %+v", info)
	}
	if code, info := statusOf(t, s, testKey, "my-env", req.BuildID, 0); code != http.StatusOK {
		t.Errorf("by ID: %d %+v", code, info)
	}
	if w := do(s, "GET", "/templates/my-env/builds/"+req.BuildID+"/status?logsOffset=-1", key(testKey), ""); w.Code != http.StatusBadRequest {
		t.Errorf("negative offset: %d", w.Code)
	}
	if w := do(s, "GET", "/templates/my-env/builds/"+req.BuildID+"/status?level=error", key(testKey), ""); w.Code != http.StatusOK || len(decode[e2bBuildInfo](t, w).LogEntries) != 0 {
		t.Errorf("level=error: %d %s", w.Code, w.Body)
	}
	if w := do(s, "GET", "/templates/my-env/builds/"+req.BuildID+"/status?level=loud", key(testKey), ""); w.Code != http.StatusBadRequest {
		t.Errorf("bad level: %d", w.Code)
	}

	// A failing step: status error, the reason's step the SDK's.
	st.script = func(core.TemplateSpec) tplBuild {
		return tplBuild{lines: []string{"Step 1/1", "exit 3"}, state: core.TemplateFailed, reason: "step 2: the command exited with code 3"}
	}
	req2 := requestBuildOf(t, s, testKey, "my-env")
	body2 := `{"fromTemplate":"base","steps":[{"type":"RUN","args":["true"]},{"type":"RUN","args":["exit 3","user"]}]}`
	if w := do(s, "POST", "/v2/templates/my-env/builds/"+req2.BuildID, key(testKey), body2); w.Code != http.StatusAccepted {
		t.Fatalf("start 2: %d %s", w.Code, w.Body)
	}
	_, info = pollBuild(t, s, testKey, "my-env", req2.BuildID)
	// Domain steps: run true (SDK 1), user sandbox (SDK 2), run exit 3 (SDK 2).
	if info.Status != "error" || info.Reason == nil || info.Reason.Message != "step 2: the command exited with code 3" || info.Reason.Step != "2" {
		t.Errorf("failed build: %+v %+v", info, info.Reason)
	}

	// Refusals reach the client with the door's message.
	req3 := requestBuildOf(t, s, testKey, "my-env")
	for b, want := range map[string]string{
		`{"fromImage":"python:3","steps":[{"type":"RUN","args":["x"]}]}`:                                                                                        `fromImage \"python:3\"`,
		`{"fromImage":"e2bdev/base","startCmd":"x","steps":[{"type":"RUN","args":["x"]}]}`:                                                                      "startCmd",
		`{"steps":[{"type":"COPY","args":["*.py","/opt/"],"filesHash":"` + hashA + `"}]}`:                                                                       "is a pattern",
		`{"steps":[{"type":"COPY","args":["../up","/opt/"],"filesHash":"` + hashA + `"}]}`:                                                                      "want a clean relative path inside the archive",
		`{"steps":[{"type":"WORKDIR","args":["/workspace/x"]}]}`:                                                                                                "sandboxd's, a template cannot write there",
		`{"steps":[{"type":"RUN","args":["apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y Bad_Pkg"],"force":true}]}`: "not a Debian package name",
		`{"steps":null}`: "no steps",
	} {
		if w := do(s, "POST", "/v2/templates/my-env/builds/"+req3.BuildID, key(testKey), b); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want) {
			t.Errorf("%s: %d %s, want 400 saying %s", b, w.Code, w.Body, want)
		}
	}
	if w := do(s, "POST", "/v2/templates/my-env/builds/not-a-uuid", key(testKey), `{"steps":[{"type":"RUN","args":["x"]}]}`); w.Code != http.StatusBadRequest {
		t.Errorf("bad build ID: %d %s", w.Code, w.Body)
	}
}

// TestTemplateBuildStatusAfterRestart: a build the door does not remember
// is the template's version with that derived ID, else its latest.
func TestTemplateBuildStatusAfterRestart(t *testing.T) {
	st := newTplStore()
	s := newTemplateServer(t, st)
	st.files["acme"] = map[string][]byte{}
	for i := 0; i < 2; i++ {
		req := requestBuildOf(t, s, testKey, "env")
		if w := do(s, "POST", "/v2/templates/env/builds/"+req.BuildID, key(testKey), fmt.Sprintf(`{"steps":[{"type":"RUN","args":["echo %d"]}]}`, i)); w.Code != http.StatusAccepted {
			t.Fatalf("start: %d %s", w.Code, w.Body)
		}
		pollBuild(t, s, testKey, "env", req.BuildID)
	}
	s2 := newTemplateServer(t, st) // the same secret, nothing remembered
	st.logCalls = nil
	if code, info := statusOf(t, s2, testKey, "env", uuid.NewString(), 0); code != http.StatusOK || info.Status != "ready" {
		t.Fatalf("unknown build: %d %+v", code, info)
	}
	if c := st.logCalls[0]; !strings.HasSuffix(c, fmt.Sprintf("/2/0/%d", core.MaxTemplateLogPage)) {
		t.Errorf("unknown build read %s, want version 2", c)
	}
	var tid string
	for id := range st.templates {
		tid = id
	}
	st.logCalls = nil
	if code, _ := statusOf(t, s2, testKey, "env", s2.templateBuildID("acme", tid, 1), 0); code != http.StatusOK || !strings.Contains(st.logCalls[0], "/1/0/") {
		t.Errorf("derived ID of version 1: %d %v", code, st.logCalls)
	}
	if code, _ := statusOf(t, s2, otherTestKey, "env", uuid.NewString(), 0); code != http.StatusNotFound {
		t.Errorf("beta: %d", code)
	}
	if code, _ := statusOf(t, s2, testKey, "nope", uuid.NewString(), 0); code != http.StatusNotFound {
		t.Errorf("unknown template: %d", code)
	}
	// The bounded memory itself: a day, at most maxBuildsKept.
	if s.builds.Len() == 0 || s2.builds.Len() != 0 {
		t.Errorf("remembered %d and %d", s.builds.Len(), s2.builds.Len())
	}
}

func TestTemplateInfoRoutes(t *testing.T) {
	st := newTplStore()
	s := newTemplateServer(t, st)
	req := requestBuildOf(t, s, testKey, "env")
	if w := do(s, "POST", "/v2/templates/env/builds/"+req.BuildID, key(testKey), `{"steps":[{"type":"RUN","args":["x"]}]}`); w.Code != http.StatusAccepted {
		t.Fatalf("start: %d %s", w.Code, w.Body)
	}
	pollBuild(t, s, testKey, "env", req.BuildID)
	var tpl core.Template
	for _, x := range st.templates {
		tpl = *x
	}
	// exists / alias lookup
	w := do(s, "GET", "/templates/aliases/env", key(testKey), "")
	if w.Code != http.StatusOK || decode[map[string]any](t, w)["templateID"] != tpl.ID {
		t.Errorf("alias: %d %s", w.Code, w.Body)
	}
	for _, k := range []string{otherTestKey, testKey} {
		ref := "env"
		if k == testKey {
			ref = "nope"
		}
		if w := do(s, "GET", "/templates/aliases/"+ref, key(k), ""); w.Code != http.StatusNotFound {
			t.Errorf("alias %s (%s): %d", ref, k, w.Code)
		}
	}
	// list
	w = do(s, "GET", "/templates", key(testKey), "")
	list := decode[[]e2bTemplate](t, w)
	if w.Code != http.StatusOK || len(list) != 1 || list[0].TemplateID != tpl.ID || list[0].Names[0] != "env" || list[0].BuildStatus != "ready" ||
		list[0].BuildID != s.templateBuildID("acme", tpl.ID, 1) || list[0].BuildCount != 1 {
		t.Errorf("list: %d %s", w.Code, w.Body)
	}
	if w := do(s, "GET", "/templates", key(otherTestKey), ""); w.Body.String() != "[]\n" {
		t.Errorf("beta's list: %s", w.Body)
	}
	// get
	for _, ref := range []string{"env", tpl.ID} {
		w = do(s, "GET", "/templates/"+ref, key(testKey), "")
		got := decode[e2bTemplateWithBuilds](t, w)
		if w.Code != http.StatusOK || got.TemplateID != tpl.ID || len(got.Builds) != 1 || got.Builds[0].Status != "ready" || got.Builds[0].FinishedAt == nil {
			t.Errorf("get %s: %d %s", ref, w.Code, w.Body)
		}
	}
	if w := do(s, "GET", "/templates/"+tpl.ID, key(otherTestKey), ""); w.Code != http.StatusNotFound {
		t.Errorf("beta gets acme's template: %d", w.Code)
	}
	// tags
	w = do(s, "GET", "/templates/env/tags", key(testKey), "")
	tags := decode[[]e2bTemplateTag](t, w)
	if w.Code != http.StatusOK || len(tags) != 1 || tags[0].Tag != "default" || tags[0].BuildID != s.templateBuildID("acme", tpl.ID, 1) {
		t.Errorf("tags: %d %s", w.Code, w.Body)
	}
	for _, m := range []string{"POST", "DELETE"} {
		if w := do(s, m, "/templates/tags", key(testKey), `{"target":"env:default","tags":["prod"]}`); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "tags are not supported") {
			t.Errorf("%s tags: %d %s", m, w.Code, w.Body)
		}
	}
	if w := do(s, "GET", "/templates/env/other", key(testKey), ""); w.Code != http.StatusNotFound {
		t.Errorf("/templates/env/other: %d", w.Code)
	}

	// Sandbox.create(name): the template, shown by its ID and alias.
	w = do(s, "POST", "/v2/sandboxes", key(testKey), `{"templateID":"env"}`)
	created := decode[sandboxCreated](t, w)
	if w.Code != http.StatusCreated || created.TemplateID != tpl.ID || created.Alias != "env" || st.acquired[0].Template != "env" || st.acquired[0].FromSnapshot != "" {
		t.Errorf("create from env: %d %s %+v", w.Code, w.Body, st.acquired)
	}
	sb := core.Sandbox{Template: tpl.ID, Metadata: map[string]string{templateKey: "env"}}
	if info := s.infoOf(sb, nil); info.TemplateID != tpl.ID || info.Alias != "env" {
		t.Errorf("info %+v", info)
	}
	if w := do(s, "POST", "/v2/sandboxes", key(testKey), `{"templateID":"`+tpl.ID+`"}`); w.Code != http.StatusCreated || st.acquired[1].Template != tpl.ID {
		t.Errorf("create from the ID: %d %s", w.Code, w.Body)
	}
	// Beta has no template env: it is taken as a snapshot, which it lacks.
	if w := do(s, "POST", "/v2/sandboxes", key(otherTestKey), `{"templateID":"env"}`); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "templates and snapshots of your team") {
		t.Errorf("beta creates from env: %d %s", w.Code, w.Body)
	}
	if w := do(s, "POST", "/v2/sandboxes", key(testKey), `{"templateID":"env:v2"}`); w.Code != http.StatusBadRequest {
		t.Errorf("a tag: %d %s", w.Code, w.Body)
	}
	if w := do(s, "POST", "/v2/sandboxes", key(testKey), `{"templateID":"base"}`); w.Code != http.StatusCreated || st.acquired[len(st.acquired)-1].Template != "" {
		t.Errorf("base: %d %s", w.Code, w.Body)
	}

	// delete: by name (no snapshot of that name), then gone.
	if w := do(s, "DELETE", "/templates/env", key(otherTestKey), ""); w.Code != http.StatusNotFound {
		t.Errorf("beta deletes env: %d", w.Code)
	}
	if w := do(s, "DELETE", "/templates/env", key(testKey), ""); w.Code != http.StatusNoContent || !reflect.DeepEqual(st.deleted, []string{tpl.ID}) {
		t.Errorf("delete: %d %v", w.Code, st.deleted)
	}
	if w := do(s, "DELETE", "/templates/"+tpl.ID, key(testKey), ""); w.Code != http.StatusNotFound {
		t.Errorf("delete again: %d", w.Code)
	}
}
