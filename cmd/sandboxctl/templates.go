package main

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/docker/go-units"
	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// templateSubcommands are template's subcommands with their number of
// positional arguments (min, max).
var templateSubcommands = map[string][2]int{
	"build": {1, 1}, "ls": {0, 0}, "get": {1, 1}, "rm": {1, 1}, "logs": {1, 1},
}

const templateSubcommandList = "build, ls, get, rm or logs"

// cmdTemplate manages templates: template build builds one from a YAML
// spec (uploading what its copy steps copy), ls|get|rm as for volumes,
// logs prints a build's log (waiting while it runs).
func cmdTemplate(ctx context.Context, c *cli, args []string) int {
	if len(args) == 0 {
		return usageErr(c.stderr, "template", fmt.Errorf("want a subcommand: %s", templateSubcommandList))
	}
	sub, args := args[0], args[1:]
	cmd := "template " + sub
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	specFile := fs.String("f", "", "build: the spec, a YAML file (\"-\": stdin); copy steps' sources are relative to its directory")
	force := fs.Bool("force", false, "build: build even when the same spec was built before")
	tenant := fs.String("tenant", "", "ls: only this tenant's templates (an admin's token)")
	version := fs.Int("version", 0, "logs: the version whose build to print (0: the latest)")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, cmd, err)
	}
	n, ok := templateSubcommands[sub]
	switch {
	case !ok:
		return usageErr(c.stderr, "template", fmt.Errorf("unknown subcommand %q (want %s)", sub, templateSubcommandList))
	case len(pos) < n[0] || len(pos) > n[1]:
		return usageErr(c.stderr, cmd, fmt.Errorf("want %d argument(s), got %d", n[0], len(pos)))
	case sub == "build" && *specFile == "":
		return usageErr(c.stderr, cmd, errors.New("want the spec: -f SPEC.yaml"))
	case *version < 0:
		return usageErr(c.stderr, cmd, fmt.Errorf("--version %d is negative", *version))
	}
	switch sub {
	case "build":
		return c.templateBuild(ctx, pos[0], *specFile, *force)
	case "logs":
		return c.templateLogs(ctx, pos[0], *version)
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	switch sub {
	case "ls":
		list, err := c.sandboxd.ListTemplates(rctx, *tenant)
		if err != nil {
			return c.fail(cmd, err)
		}
		if format == "json" {
			if err := writeJSONList(c.stdout, list); err != nil {
				return c.fail(cmd, err)
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TEMPLATE\tNAME\tTENANT\tREADY\tLATEST\tSIZE\tUSED_BY\tCREATED")
		for _, t := range list {
			ready, size, used := "-", "-", 0
			if v := currentVersion(t); v != nil {
				ready, size = fmt.Sprint(v.GetVersion()), units.BytesSize(float64(v.GetSizeBytes()))
			}
			for _, v := range t.GetVersions() {
				used += int(v.GetUsedBy())
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", termsafe.Field(t.GetId()), termsafe.Field(t.GetName()), termsafe.Field(t.GetTenant()), ready, latestSummary(t), size, used, formatTime(t.GetCreatedAt()))
		}
		if err := tw.Flush(); err != nil {
			return c.fail(cmd, err)
		}
	case "get":
		t, err := c.sandboxd.GetTemplate(rctx, pos[0])
		if err != nil {
			return c.fail(cmd+" "+pos[0], err)
		}
		if err := writeJSON(c.stdout, t); err != nil {
			return c.fail(cmd, err)
		}
	case "rm":
		if err := c.sandboxd.DeleteTemplate(rctx, pos[0]); err != nil {
			return c.fail(cmd+" "+pos[0], err)
		}
	}
	return exitOK
}

// currentVersion is a template's latest ready version (nil: none).
func currentVersion(t *sandboxv1.Template) *sandboxv1.TemplateVersion {
	vs := t.GetVersions()
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].GetState() == sandboxv1.TemplateState_TEMPLATE_STATE_READY {
			return vs[i]
		}
	}
	return nil
}

// latestSummary shows a template's newest version and its state ("3
// building").
func latestSummary(t *sandboxv1.Template) string {
	vs := t.GetVersions()
	if len(vs) == 0 {
		return "-"
	}
	v := vs[len(vs)-1]
	return fmt.Sprintf("%d %s", v.GetVersion(), stateWord(v.GetState()))
}

// stateWord is a template state in lower case ("ready").
func stateWord(s sandboxv1.TemplateState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TEMPLATE_STATE_"))
}

// templateBuild parses the spec, uploads the archives its copy steps
// need, builds, and prints the build's log as it streams. The status is
// non-zero unless the version is ready.
func (c *cli) templateBuild(ctx context.Context, name, specFile string, force bool) int {
	cmd := "template build " + name
	var data []byte
	var err error
	dir := "."
	if specFile == "-" {
		data, err = io.ReadAll(c.stdin)
	} else {
		data, err = os.ReadFile(specFile)
		dir = filepath.Dir(specFile)
	}
	if err != nil {
		return c.fail(cmd, err)
	}
	spec, copies, err := parseTemplateSpec(data)
	if err != nil {
		return c.fail(cmd, fmt.Errorf("%s: %w", specFile, err))
	}
	// Each local source is packed and uploaded once, however many steps
	// copy it.
	keys := map[string]string{}
	for _, cp := range copies {
		src := cp.local
		if !filepath.IsAbs(src) {
			src = filepath.Join(dir, src)
		}
		key, ok := keys[src]
		if !ok {
			key, err = c.uploadTree(ctx, src)
			if err != nil {
				return c.fail(cmd+": copy "+cp.local, err)
			}
			keys[src] = key
		}
		cp.step.Archive = key
	}
	t, v, err := c.sandboxd.BuildTemplate(ctx, name, spec, force, func(l *sandboxv1.TemplateBuildLine) {
		fmt.Fprintln(c.stdout, termsafe.Line(l.GetLine()))
	})
	if err != nil {
		if v != nil && v.GetVersion() > 0 {
			fmt.Fprintf(c.stderr, "sandboxctl: template %s version %d failed (sandboxctl template logs %s --version %d prints its log)\n",
				name, v.GetVersion(), name, v.GetVersion())
		}
		return c.fail(cmd, err)
	}
	how := "built"
	if v.GetCached() {
		how = "ready from an earlier build of the same spec"
	}
	fmt.Fprintf(c.stderr, "sandboxctl: template %s (%s) version %d %s, %s\n", termsafe.Field(t.GetName()), termsafe.Field(t.GetId()), v.GetVersion(), how, units.BytesSize(float64(v.GetSizeBytes())))
	return exitOK
}

// templateLogs prints a build's log, following it while it runs.
func (c *cli) templateLogs(ctx context.Context, ref string, version int) int {
	v, err := c.sandboxd.FollowTemplateBuild(ctx, ref, version, 0, func(l *sandboxv1.TemplateBuildLine) {
		fmt.Fprintln(c.stdout, termsafe.Line(l.GetLine()))
	})
	if err != nil {
		return c.fail("template logs "+ref, err)
	}
	fmt.Fprintf(c.stderr, "sandboxctl: template %s version %d %s\n", ref, v.GetVersion(), stateWord(v.GetState()))
	return exitOK
}

// uploadTree packs src (a file or a directory) as a tar whose one top
// entry is src's base name, spooled to a temporary file while hashed, and
// uploads it under its SHA-256.
func (c *cli) uploadTree(ctx context.Context, src string) (string, error) {
	f, err := os.CreateTemp("", "sandboxctl-template-*.tar")
	if err != nil {
		return "", err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	h := sha256.New()
	if err := tarTree(io.MultiWriter(f, h), src); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	key := hex.EncodeToString(h.Sum(nil))
	if _, err := c.sandboxd.UploadTemplateFile(ctx, key, f); err != nil {
		return "", err
	}
	return key, nil
}

// tarEpoch is every entry's modification time: the archive of unchanged
// files is then the same bytes, so its key, and the spec's hash, stay the
// same and sandboxd does not build an unchanged spec again.
var tarEpoch = time.Unix(0, 0)

// tarTree writes src (a file or a directory, with what it holds) as a tar
// whose one top entry is src's base name. Entries are in lexical order,
// owned by root, with their permission bits and tarEpoch as their time;
// symbolic links are kept as links. Other kinds of files are refused.
func tarTree(w io.Writer, src string) error {
	src = filepath.Clean(src)
	base := filepath.Base(src)
	if base == "." || base == ".." || base == string(filepath.Separator) {
		return fmt.Errorf("%s: name a file or directory by its own name (not %q)", src, base)
	}
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := base
		if rel != "." {
			name = base + "/" + filepath.ToSlash(rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Mode: int64(info.Mode().Perm()), ModTime: tarEpoch, Format: tar.FormatPAX}
		switch {
		case info.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		case info.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		default:
			return fmt.Errorf("%s: not a regular file, directory or symbolic link", p)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := io.Copy(tw, f); err != nil {
			return err
		} else if n != hdr.Size {
			return fmt.Errorf("%s changed while it was packed", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// specFile is a template spec as written in YAML:
//
//	base: ""            # or another template
//	steps:
//	  - apt: [jq]
//	  - copy: {src: ./local/dir-or-file, dest: /opt/tool/, mode: 0644, owner: sandbox}
//	  - env: {TOOL_HOME: /opt/tool}
//	  - workdir: /opt/tool
//	  - user: sandbox
//	  - run: echo built > /opt/tool/stamp
type specFile struct {
	Base  string     `json:"base"`
	Steps []specStep `json:"steps"`
}

// specStep is one step: exactly one field set.
type specStep struct {
	Apt     []string          `json:"apt"`
	Copy    *specCopy         `json:"copy"`
	Env     map[string]string `json:"env"`
	Workdir string            `json:"workdir"`
	User    string            `json:"user"`
	Run     string            `json:"run"`
}

// specCopy is a copy step: a local file or directory (relative to the
// spec's directory), packed and uploaded by sandboxctl.
type specCopy struct {
	Src   string    `json:"src"`
	Dest  string    `json:"dest"`
	Mode  octalMode `json:"mode"`
	Owner string    `json:"owner"`
}

// octalMode is a copy step's mode: YAML's 0644 (an octal number) or a
// string of octal digits ("0644", "644", "0o644").
type octalMode uint32

// UnmarshalJSON implements json.Unmarshaler.
func (m *octalMode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O"), 8, 32)
		if err != nil || n > 0o777 {
			return fmt.Errorf("mode %q: want permission bits in octal, such as 0644", s)
		}
		*m = octalMode(n)
		return nil
	}
	var n uint32
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("mode %s: want permission bits in octal, such as 0644", b)
	}
	if n > 0o777 {
		// YAML reads 0644 as octal but 644 as decimal.
		return fmt.Errorf("mode %d: write permission bits in octal with a leading 0 (0%d) or quoted (\"%d\")", n, n, n)
	}
	*m = octalMode(n)
	return nil
}

// yamlErrors takes the YAML library's layers and Go's type names out of
// its messages.
var yamlErrors = strings.NewReplacer("error converting YAML to JSON: ", "", "error unmarshaling JSON: ", "",
	"while decoding JSON: ", "", "json: ", "", "Go value of type main.specFile", "a spec (a mapping of base and steps)",
	"Go struct field specFile.", "field ", "Go struct field specStep.", "field ", "Go struct field specCopy.", "field ")

// localCopy is a copy step whose archive is still to be made from a
// local path.
type localCopy struct {
	local string
	step  *sandboxv1.CopyStep
}

// parseTemplateSpec reads a YAML spec into the wire's form, with the copy
// steps whose archives are to be uploaded (their archive key empty until
// then; src is the local path's base name, the archive's top entry).
// Unknown fields and steps that set nothing or several things are errors
// naming the step.
func parseTemplateSpec(data []byte) (*sandboxv1.TemplateSpec, []localCopy, error) {
	var sf specFile
	if err := yaml.UnmarshalStrict(data, &sf); err != nil {
		return nil, nil, fmt.Errorf("not a template spec: %s", yamlErrors.Replace(err.Error()))
	}
	if len(sf.Steps) == 0 {
		return nil, nil, errors.New("the spec has no steps (want steps: [...], each one of apt, copy, env, workdir, user, run)")
	}
	spec := &sandboxv1.TemplateSpec{Base: sf.Base}
	var copies []localCopy
	for i, st := range sf.Steps {
		var set []string
		ps := &sandboxv1.TemplateStep{}
		if st.Apt != nil {
			set = append(set, "apt")
			ps.Step = &sandboxv1.TemplateStep_Apt{Apt: &sandboxv1.AptStep{Packages: st.Apt}}
		}
		if st.Copy != nil {
			set = append(set, "copy")
			c := st.Copy
			if c.Src == "" || c.Dest == "" {
				return nil, nil, fmt.Errorf("step %d: copy needs src (a local file or directory) and dest (where in the image)", i+1)
			}
			cs := &sandboxv1.CopyStep{Src: filepath.Base(filepath.Clean(c.Src)), Dest: c.Dest, Mode: uint32(c.Mode), Owner: c.Owner}
			copies = append(copies, localCopy{local: c.Src, step: cs})
			ps.Step = &sandboxv1.TemplateStep_Copy{Copy: cs}
		}
		if st.Env != nil {
			set = append(set, "env")
			ps.Step = &sandboxv1.TemplateStep_Env{Env: &sandboxv1.EnvStep{Vars: st.Env}}
		}
		if st.Workdir != "" {
			set = append(set, "workdir")
			ps.Step = &sandboxv1.TemplateStep_Workdir{Workdir: st.Workdir}
		}
		if st.User != "" {
			set = append(set, "user")
			ps.Step = &sandboxv1.TemplateStep_User{User: st.User}
		}
		if st.Run != "" {
			set = append(set, "run")
			ps.Step = &sandboxv1.TemplateStep_Run{Run: st.Run}
		}
		if len(set) != 1 {
			what := "nothing"
			if len(set) > 1 {
				what = strings.Join(set, " and ")
			}
			return nil, nil, fmt.Errorf("step %d sets %s; set exactly one of apt, copy, env, workdir, user, run", i+1, what)
		}
		spec.Steps = append(spec.Steps, ps)
	}
	return spec, copies, nil
}
