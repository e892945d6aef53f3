package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	"github.com/sandboxd/sandboxd/orchestrator/core/coretest"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

const tplA = "tpl-aaaaaaaaaaaaaaaaaaaa"

// everyStepYAML is a spec with every kind of step.
const everyStepYAML = `
base: ""            # or another template
steps:
  - apt: [jq, curl]
  - copy: {src: ./local/tool, dest: /opt/tool/, mode: 0644, owner: sandbox}
  - env: {TOOL_HOME: /opt/tool, PORT: 8080}
  - workdir: /opt/tool
  - user: sandbox
  - run: echo built > /opt/tool/stamp
  - copy:
      src: local/tool/
      dest: /srv/tool
      mode: "0755"
`

func TestParseTemplateSpec(t *testing.T) {
	spec, copies, err := parseTemplateSpec([]byte(everyStepYAML))
	if err != nil {
		t.Fatal(err)
	}
	want := &sandboxv1.TemplateSpec{Steps: []*sandboxv1.TemplateStep{
		{Step: &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{Packages: []string{"jq", "curl"}}}},
		{Step: &sandboxv1.TemplateStep_Copy{Copy: &sandboxv1.CopyStep{Src: "tool", Dest: "/opt/tool/", Mode: 0o644, Owner: "sandbox"}}},
		{Step: &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{Vars: map[string]string{"TOOL_HOME": "/opt/tool", "PORT": "8080"}}}},
		{Step: &sandboxv1.TemplateStep_Workdir{Workdir: "/opt/tool"}},
		{Step: &sandboxv1.TemplateStep_User{User: "sandbox"}},
		{Step: &sandboxv1.TemplateStep_Run{Run: "echo built > /opt/tool/stamp"}},
		{Step: &sandboxv1.TemplateStep_Copy{Copy: &sandboxv1.CopyStep{Src: "tool", Dest: "/srv/tool", Mode: 0o755}}},
	}}
	if diff := cmp.Diff(want, spec, protocmp.Transform()); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if len(copies) != 2 || copies[0].local != "./local/tool" || copies[1].local != "local/tool/" ||
		copies[0].step != spec.GetSteps()[1].GetCopy() || copies[1].step != spec.GetSteps()[6].GetCopy() {
		t.Errorf("copies = %+v", copies)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"steps: [", "not a template spec"},
		{"- apt: [jq]", "not a template spec"},
		{"steps:\n  - apt: [jq]\n    run: x\n", "step 1 sets apt and run"},
		{"steps:\n  - run: ok\n  - {}\n", "step 2 sets nothing"},
		{"steps:\n  - aptt: [jq]\n", `unknown field "aptt"`},
		{"base: x\nsteps: []\n", "no steps"},
		{"", "no steps"},
		{"steps:\n  - copy: {src: a, dest: /a, mode: 644}\n", "mode 644: write permission bits in octal"},
		{"steps:\n  - copy: {src: a, dest: /a, mode: rw}\n", `mode "rw"`},
		{"steps:\n  - copy: {dest: /a}\n", "step 1: copy needs src"},
		{"steps:\n  - copy: {src: a, dest: /a, mod: 1}\n", `unknown field "mod"`},
	} {
		_, _, err := parseTemplateSpec([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
}

// tarEntries lists a tar's entries as "name type mode [content|->target]".
func tarEntries(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		e := h.Name + " " + string(h.Typeflag) + " " + strings.TrimLeft(string(rune('0'+h.Mode>>6&7))+string(rune('0'+h.Mode>>3&7))+string(rune('0'+h.Mode&7)), "")
		switch h.Typeflag {
		case tar.TypeReg:
			c, _ := io.ReadAll(tr)
			e += " " + string(c)
		case tar.TypeSymlink:
			e += " ->" + h.Linkname
		}
		if !h.ModTime.Equal(tarEpoch) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: time %v, owner %d:%d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		out = append(out, e)
	}
}

func TestTarTree(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "tool")
	os.MkdirAll(filepath.Join(tool, "bin"), 0o755)
	os.WriteFile(filepath.Join(tool, "bin", "run"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(tool, "README"), []byte("hi"), 0o644)
	os.Symlink("bin/run", filepath.Join(tool, "run"))
	var a, b bytes.Buffer
	if err := tarTree(&a, tool+"/"); err != nil {
		t.Fatal(err)
	}
	want := []string{"tool/ 5 755", "tool/README 0 644 hi", "tool/bin/ 5 755", "tool/bin/run 0 755 #!/bin/sh\n", "tool/run 2 777 ->bin/run"}
	if diff := cmp.Diff(want, tarEntries(t, a.Bytes())); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	// The same files are the same bytes (the same key), whatever their
	// times.
	os.Chtimes(filepath.Join(tool, "README"), t0, t0)
	if err := tarTree(&b, tool); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("a second archive of the same files differs (%v)", err)
	}
	// A file alone: one entry, its base name.
	var f bytes.Buffer
	if err := tarTree(&f, filepath.Join(tool, "README")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"README 0 644 hi"}, tarEntries(t, f.Bytes())); diff != "" {
		t.Errorf("file entries (-want +got):\n%s", diff)
	}
	if err := tarTree(io.Discard, filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing source was packed")
	}
	if err := tarTree(io.Discard, "/"); err == nil {
		t.Error("the root was packed")
	}
}

func TestTemplateBuildCommand(t *testing.T) {
	var mu sync.Mutex
	archives := map[string][]byte{}
	var built []core.TemplateSpec
	fail := false
	tpl := core.Template{ID: tplA, Name: "tools", Tenant: "default", CreatedAt: t0}
	fake := &coretest.Manager{
		PutTemplateFileFunc: func(_ context.Context, key string, r io.Reader) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := archives[key]; ok {
				return true, nil
			}
			b, err := io.ReadAll(r)
			archives[key] = b
			return false, err
		},
		BuildTemplateFunc: func(_ context.Context, name string, spec core.TemplateSpec, force bool) (core.Template, core.TemplateVersion, error) {
			mu.Lock()
			built = append(built, spec)
			mu.Unlock()
			v := core.TemplateVersion{Version: len(built), State: core.TemplateBuilding, StartedAt: t0}
			return tpl, v, nil
		},
		FollowTemplateBuildFunc: func(_ context.Context, ref string, version int, after int64, fn func(core.TemplateBuildEvent) error) error {
			fn(core.TemplateBuildEvent{Seq: 1, Line: "Step 1/7 : apt-get install jq curl"})
			fn(core.TemplateBuildEvent{Seq: 2, Line: "done"})
			v := core.TemplateVersion{Version: version, State: core.TemplateReady, StartedAt: t0, FinishedAt: t0, SizeBytes: 300 << 20}
			if fail {
				v.State, v.Reason = core.TemplateFailed, "step 6 (run): exit status 127"
			}
			fn(core.TemplateBuildEvent{Seq: 3, Done: &v})
			if fail {
				return coretest.Errorf(core.ErrFailedPrecondition, "template tools version %d: %s", version, v.Reason)
			}
			return nil
		},
	}
	addr := startServer(t, fake)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "local", "tool"), 0o755)
	os.WriteFile(filepath.Join(dir, "local", "tool", "x.sh"), []byte("echo x\n"), 0o755)
	specPath := filepath.Join(dir, "tools.yaml")
	os.WriteFile(specPath, []byte(everyStepYAML), 0o644)

	r := runCLI(t, nil, addr, "", "template", "build", "-f", specPath, "tools")
	if r.code != exitOK || r.stdout != "Step 1/7 : apt-get install jq curl\ndone\n" || !strings.Contains(r.stderr, "template tools ("+tplA+") version 1 built, 300MiB") {
		t.Fatalf("build: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// One archive for the two steps copying the same directory, under its
	// SHA-256, named in both steps with the directory's base name.
	if len(archives) != 1 {
		t.Fatalf("%d archives uploaded, want 1", len(archives))
	}
	var key string
	for k, b := range archives {
		sum := sha256.Sum256(b)
		if k != hex.EncodeToString(sum[:]) {
			t.Errorf("archive key %s is not its SHA-256", k)
		}
		if diff := cmp.Diff([]string{"tool/ 5 755", "tool/x.sh 0 755 echo x\n"}, tarEntries(t, b)); diff != "" {
			t.Errorf("archive (-want +got):\n%s", diff)
		}
		key = k
	}
	wantCopies := []*core.TemplateCopy{
		{Archive: key, Src: "tool", Dest: "/opt/tool/", Mode: 0o644, Owner: "sandbox"},
		{Archive: key, Src: "tool", Dest: "/srv/tool", Mode: 0o755},
	}
	if got := []*core.TemplateCopy{built[0].Steps[1].Copy, built[0].Steps[6].Copy}; !reflect.DeepEqual(got, wantCopies) || len(built[0].Steps) != 7 {
		t.Errorf("built %+v", built[0])
	}

	// Again, failing: the log, then the error; the upload is not repeated
	// (existed).
	fail = true
	r = runCLI(t, nil, addr, "", "template", "build", "--force", "-f", specPath, "tools")
	if r.code != 1 || !strings.Contains(r.stdout, "done\n") || !strings.Contains(r.stderr, "sandboxctl: template build tools: template tools version 2: step 6 (run): exit status 127") ||
		!strings.Contains(r.stderr, "template logs tools --version 2") {
		t.Errorf("failed build: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The spec from stdin: copy sources relative to the working directory.
	r = runCLI(t, nil, addr, "steps:\n  - run: 'true'\n", "template", "build", "-f", "-", "tools")
	if r.code != 1 || len(built) != 3 || built[2].Steps[0].Run != "true" {
		t.Errorf("build from stdin: exit %d, stderr %q, built %+v", r.code, r.stderr, built)
	}
	// A bad spec never reaches the server.
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("steps:\n  - apt: [jq]\n    run: x\n"), 0o644)
	r = runCLI(t, nil, addr, "", "template", "build", "-f", bad, "tools")
	if r.code != 1 || len(built) != 3 {
		t.Errorf("bad spec: exit %d, built %d", r.code, len(built))
	}
	oneLine(t, r.stderr, "sandboxctl: template build tools: "+bad+": step 1 sets apt and run")
	missing := filepath.Join(dir, "missing.yaml")
	os.WriteFile(missing, []byte("steps:\n  - copy: {src: nope, dest: /a}\n"), 0o644)
	r = runCLI(t, nil, addr, "", "template", "build", "-f", missing, "tools")
	if r.code != 1 || len(built) != 3 {
		t.Errorf("missing source: exit %d, built %d", r.code, len(built))
	}
	oneLine(t, r.stderr, "sandboxctl: template build tools: copy nope: ")
}

func TestTemplateCommands(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	tpl := core.Template{ID: tplA, Name: "tools", Tenant: "default", CreatedAt: t0, Versions: []core.TemplateVersion{
		{Version: 1, State: core.TemplateReady, SizeBytes: 300 << 20, UsedBy: 2},
		{Version: 2, State: core.TemplateFailed, Reason: "step 1 (apt): no such package"},
	}}
	fake := &coretest.Manager{
		ListTemplatesFunc: func(_ context.Context, tenant string) ([]core.Template, error) {
			note("ls " + tenant)
			return []core.Template{tpl, {ID: "tpl-bbbbbbbbbbbbbbbbbbbb", Name: "empty", Tenant: "acme", CreatedAt: t0}}, nil
		},
		GetTemplateFunc: func(_ context.Context, ref string) (core.Template, error) {
			if ref != "tools" {
				return core.Template{}, core.TemplateNotFound(ref)
			}
			return tpl, nil
		},
		DeleteTemplateFunc: func(_ context.Context, ref string) error {
			note("rm " + ref)
			return nil
		},
		FollowTemplateBuildFunc: func(_ context.Context, ref string, version int, after int64, fn func(core.TemplateBuildEvent) error) error {
			note("logs " + ref + " " + string(rune('0'+version)))
			fn(core.TemplateBuildEvent{Seq: 1, Line: "E: Unable to locate package nope"})
			v := tpl.Versions[1]
			fn(core.TemplateBuildEvent{Seq: 2, Done: &v})
			return coretest.Errorf(core.ErrFailedPrecondition, "template tools version 2: %s", v.Reason)
		},
		AcquireFunc: func(_ context.Context, user string, opts core.Options) (core.AcquireResult, error) {
			note("acquire " + user + " " + opts.Template)
			return core.AcquireResult{Sandbox: core.Sandbox{ID: sbA, UserID: user, State: core.StateRunning, Template: tplA, TemplateVersion: 1}, Created: true}, nil
		},
		SubmitFunc: func(_ context.Context, req core.ExecRequest) (string, error) { return req.CommandID, nil },
		FollowFunc: func(_ context.Context, _, cid string, _ int64, fn func(core.Event) error) error {
			return fn(core.Event{Seq: 1, Type: ioproto.EventDone, Status: ioproto.StatusOK})
		},
	}
	addr := startServer(t, fake)
	r := runCLI(t, nil, addr, "", "template", "ls")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "TEMPLATE") ||
		!strings.Contains(r.stdout, tplA+"  tools  default  1      2 failed  300MiB  2        2026-11-21 07:30:00") ||
		!strings.Contains(r.stdout, "empty  acme     -      -         -       0") {
		t.Errorf("ls: exit %d, stdout\n%s(stderr %q)", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "template", "ls", "--tenant", "acme", "-o", "json")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "[") || !strings.Contains(r.stdout, `"id": "`+tplA+`"`) {
		t.Errorf("ls -o json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "template", "get", "tools")
	if r.code != exitOK || !strings.Contains(r.stdout, `"state": "TEMPLATE_STATE_FAILED"`) || !strings.Contains(r.stdout, "no such package") {
		t.Errorf("get: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "template", "get", "nope")
	if r.code != 1 {
		t.Errorf("get nope: exit %d", r.code)
	}
	oneLine(t, r.stderr, `sandboxctl: template get nope: template "nope" not found`)
	r = runCLI(t, nil, addr, "", "template", "logs", "tools", "--version", "2")
	if r.code != 1 || r.stdout != "E: Unable to locate package nope\n" || !strings.Contains(r.stderr, "step 1 (apt): no such package") {
		t.Errorf("logs: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "template", "rm", "tools")
	if r.code != exitOK || r.stdout != "" || r.stderr != "" {
		t.Errorf("rm: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, nil, addr, "", "exec", "--user", "alice", "--template", "tools", "1")
	if r.code != exitOK {
		t.Errorf("exec --template: exit %d, stderr %q", r.code, r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"ls ", "ls acme", "logs tools 2", "rm tools", "acquire alice tools"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", calls, want)
	}
}

func TestTemplateCommandsUsage(t *testing.T) {
	fake := &coretest.Manager{}
	addr := startServer(t, fake)
	for _, args := range [][]string{
		{"template"}, {"template", "frobnicate"}, {"template", "build", "tools"}, {"template", "build", "-f", "x.yaml"},
		{"template", "ls", "x"}, {"template", "get"}, {"template", "rm"}, {"template", "logs"},
		{"template", "logs", "tools", "--version", "-1"},
		{"exec", "--sandbox", sbA, "--template", "tools", "1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := runCLI(t, nil, addr, "", args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, exitUsage, r.stderr)
			}
			oneLine(t, r.stderr, "sandboxctl "+args[0])
		})
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Errorf("usage errors reached the server: %v", calls)
	}
}
