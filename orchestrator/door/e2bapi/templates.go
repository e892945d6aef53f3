package e2bapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jellydator/ttlcache/v3"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// E2B's template builds (the SDK's Template builder and Template.build)
// over the domain's templates (core.TemplateSpec, core.Manager's template
// methods). The SDK's build is four calls, all authenticated by X-API-KEY
// but the upload:
//
//	POST /v3/templates {name, tags, cpuCount, memoryMB}    → {templateID, buildID, names, tags, aliases, public}
//	GET  /templates/{templateID}/files/{hash}              → {present, url}   (per COPY step)
//	PUT  url (the archive, a tar or tar.gz)                → 200              (when not present)
//	POST /v2/templates/{templateID}/builds/{buildID} {fromImage|fromTemplate, steps, force}  → 202
//	GET  /templates/{templateID}/builds/{buildID}/status?logsOffset=N  → {status, logEntries, reason}  (polled)
//
// and Template.exists (GET /templates/aliases/{alias}), Template.getTags
// (GET /templates/{templateID}/tags); the CLI's GET /templates, GET
// /templates/{templateID} and DELETE /templates/{templateID} map onto the
// domain too. Tags do not: the domain keeps one line of versions per
// template, and a sandbox gets its latest ready one, which is what E2B's
// "default" tag means; other tags are refused.
//
// The templateID this door hands out is the template's name (the domain
// creates a template at its first build, so there is no ID before it);
// every route takes a name or an ID (tpl-…), as the domain does. The
// buildID is a fresh UUID per build request, remembered (bounded, for a
// day) with the version the build became, so that status polls find it;
// a build the door does not remember (a restart) is the template's
// version whose derived ID it is (templateBuildID), else its latest.
//
// What a template can be built from is the server's sandbox image or
// another template of the tenant: the server builds offline and pulls
// nothing, so registry images are refused by name; so are a start and a
// ready command (a sandbox runs sandboxd's driver, not the template's
// process).

// The SDK's names for the server's own image: fromBaseImage() sends
// e2bBaseImage; fromTemplate() the E2B templates this door serves.
const e2bBaseImage = "e2bdev/base"

// defaultTag is E2B's tag of a template's latest build.
const defaultTag = "default"

// templateUploadName is the name an archive upload's calls carry
// (core.Caller.Name): they are authorised by a signed URL.
const templateUploadName = "e2b-template-upload"

// Bounds of the build routes.
const (
	// maxTemplateBody bounds a build's body: the domain's steps at their
	// largest (core.MaxTemplateSteps Run steps of core.MaxTemplateRunBytes)
	// with room for JSON's escapes.
	maxTemplateBody = 4 << 20
	// maxBuildsKept and buildKeep bound what the door remembers of builds.
	maxBuildsKept = 10000
	buildKeep     = 24 * time.Hour
	// uploadURLTTL is how long an upload URL is good for.
	uploadURLTTL = time.Hour
)

// buildEntry is what the door remembers of a build request: whose, of
// which template, and (once started) its version and how its steps map
// onto the SDK's (stepOf[i] is the SDK's step number of the domain's
// step i+1, counted from 1 as the SDK's stack traces are).
type buildEntry struct {
	tenant     string
	name       string
	templateID string
	version    int
	stepOf     []int
}

func newBuildCache() *ttlcache.Cache[string, buildEntry] {
	return ttlcache.New(ttlcache.WithTTL[string, buildEntry](buildKeep), ttlcache.WithCapacity[string, buildEntry](maxBuildsKept),
		ttlcache.WithDisableTouchOnHit[string, buildEntry]())
}

// templateBuildID is a version's build ID when the door does not remember
// the one it handed out: a UUID (version 8) of an HMAC of the tenant,
// template and version, the same after a restart.
func (s *Server) templateBuildID(tenant, templateID string, version int) string {
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte("e2b-template-build:" + tenant + "\x00" + templateID + "\x00" + strconv.Itoa(version)))
	var u uuid.UUID
	copy(u[:], mac.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u.String()
}

// uploadToken signs an archive upload for tenant under key, good until
// exp: the tenant (base64url), exp (Unix seconds) and an HMAC of both and
// the key.
func (s *Server) uploadToken(tenant, key string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return base64.RawURLEncoding.EncodeToString([]byte(tenant)) + "." + e + "." + s.uploadMAC(tenant, key, e)
}

func (s *Server) uploadMAC(tenant, key, exp string) string {
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte("e2b-template-upload:" + tenant + "\x00" + key + "\x00" + exp))
	return hex.EncodeToString(mac.Sum(nil))
}

// checkUploadToken returns the tenant an upload token was issued to, if
// tok is a token for key that has not expired.
func (s *Server) checkUploadToken(tok, key string, now time.Time) (string, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(parts[0]) > 4*core.MaxTenantLen {
		return "", false
	}
	tenant, err := base64.RawURLEncoding.DecodeString(parts[0])
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || err2 != nil || len(tenant) == 0 {
		return "", false
	}
	if !hmac.Equal([]byte(parts[2]), []byte(s.uploadMAC(string(tenant), key, parts[1]))) || now.Unix() > exp {
		return "", false
	}
	return string(tenant), true
}

var errUploadToken = &apiError{status: http.StatusUnauthorized,
	msg: "the upload URL's token is missing, wrong or expired; ask for a new one (GET /templates/{templateID}/files/{hash})"}

// templateName reads a template reference from a path: a name or an ID.
// An ID must be the caller's template (its name is returned); a name may
// be new.
func (s *Server) templateName(ctx context.Context, ref string) (string, error) {
	if core.IsTemplateID(ref) {
		t, err := s.m.GetTemplate(ctx, ref)
		if err != nil {
			return "", err
		}
		return t.Name, nil
	}
	if err := core.ValidateTemplateName(ref); err != nil {
		return "", err
	}
	return ref, nil
}

// splitTag splits E2B's "name:tag"; a tag other than the default one is
// refused.
func splitTag(ref string) (string, error) {
	name, tag, ok := strings.Cut(ref, ":")
	if ok && tag != defaultTag {
		return "", badRequest(fmt.Sprintf("template %q: tags are not supported by sandboxd (a template's sandboxes get its latest ready build, E2B's %q tag); build %q without a tag", sanitizeHeader(ref), defaultTag, sanitizeHeader(name)))
	}
	return name, nil
}

// e2bTemplateRequested is E2B's TemplateRequestResponseV3.
type e2bTemplateRequested struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
	Aliases    []string `json:"aliases"`
	Public     bool     `json:"public"`
}

// requestBuild answers POST /v3/templates {name (or alias), tags,
// cpuCount, memoryMB, minFreeDiskMb}: a build ID for the template name.
// The resources are not the template's to say (a sandbox's limits are
// the server's, or its create's); they are accepted and ignored.
func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request) {
	var name, alias string
	var tags []string
	var n1, n2, n3 *int64
	err := decodeObject(r.Body, map[string]field{
		"name": stringField(&name, maxNameLen), "alias": stringField(&alias, maxNameLen),
		"tags": stringListField(&tags, 16, maxNameLen), "cpuCount": intField(&n1), "memoryMB": intField(&n2),
		"minFreeDiskMb": intField(&n3),
	})
	if err == nil {
		name, err = splitTag(cmpOr(name, alias))
	}
	for _, t := range tags {
		if err == nil && t != defaultTag {
			err = badRequest(fmt.Sprintf("tag %q: tags are not supported by sandboxd (a template's sandboxes get its latest ready build, E2B's %q tag)", sanitizeHeader(t), defaultTag))
		}
	}
	if err == nil && slices.Contains(templates, name) {
		err = badRequest(fmt.Sprintf("template name %q is one of E2B's, which sandboxd serves with its sandbox image; choose another name", name))
	}
	if err == nil {
		name, err = s.templateName(r.Context(), name)
	}
	if err == nil {
		// A backend without templates refuses here, at the build's first
		// call, rather than at its upload or start.
		if _, gerr := s.m.GetTemplate(r.Context(), name); core.IsUnsupported(gerr) {
			err = gerr
		}
	}
	if err != nil {
		s.writeError(w, r, "request build", err)
		return
	}
	id := uuid.NewString()
	s.builds.Set(id, buildEntry{tenant: core.CallerOf(r.Context()).Tenant, name: name}, ttlcache.DefaultTTL)
	writeJSON(w, http.StatusAccepted, e2bTemplateRequested{TemplateID: name, BuildID: id, Names: []string{name},
		Tags: []string{defaultTag}, Aliases: []string{name}})
}

// e2bFileUpload is E2B's TemplateBuildFileUpload.
type e2bFileUpload struct {
	Present bool   `json:"present"`
	URL     string `json:"url"`
}

// fileUploadLink answers GET /templates/{templateID}/files/{hash}:
// whether the tenant has the archive already, and a URL of this door's to
// PUT it to (signed for the tenant and that key, for an hour). The
// archives are the tenant's, not the template's: the template need not
// exist yet.
func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request) {
	hash := r.PathValue("hash")
	if _, err := s.templateName(r.Context(), r.PathValue("templateID")); err != nil {
		s.writeError(w, r, "file upload link", err)
		return
	}
	if err := core.ValidateTemplateFileKey(hash); err != nil {
		s.writeError(w, r, "file upload link", err)
		return
	}
	present, err := s.m.HasTemplateFile(r.Context(), hash)
	if err != nil {
		s.writeError(w, r, "file upload link", err)
		return
	}
	tok := s.uploadToken(core.CallerOf(r.Context()).Tenant, hash, time.Now().Add(uploadURLTTL))
	writeJSON(w, http.StatusOK, e2bFileUpload{Present: present, URL: baseURL(r) + "/templatefiles/" + hash + "?token=" + tok})
}

// baseURL is the URL at which the client reached this door.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// uploadTemplateFile answers PUT /templatefiles/{hash}?token=: the body
// (the SDK's tar.gz of a COPY step's files), streamed into the domain as
// is (bounded there, core.Policy.MaxTemplateFileBytes). A key the tenant
// has already is not read again (keys name content).
func (s *Server) uploadTemplateFile(w http.ResponseWriter, r *http.Request) {
	hash := r.PathValue("hash")
	if err := core.ValidateTemplateFileKey(hash); err != nil {
		s.writeError(w, r, "template upload", err)
		return
	}
	tenant, ok := s.checkUploadToken(r.URL.Query().Get("token"), hash, time.Now())
	if !ok {
		s.writeError(w, r, "template upload", errUploadToken)
		return
	}
	r = r.WithContext(core.WithCaller(r.Context(), core.Caller{Tenant: tenant, Name: templateUploadName}))
	if !s.admit(w, r, tenant, streamed) {
		return
	}
	rb := &recordedBody{ReadCloser: r.Body}
	existed, err := s.m.PutTemplateFile(r.Context(), hash, rb)
	if err != nil {
		s.writeError(w, r, "template upload", cmpErr(rb.failure(), err))
		return
	}
	if existed {
		// The domain did not read it (the tenant has that key already, from
		// another upload: forceUpload, or two COPY steps of the same
		// files). It is read to its end all the same, bounded, as a client
		// streaming a body may not read the answer before it has sent it.
		_, _ = io.Copy(io.Discard, io.LimitReader(rb, core.DefaultMaxTemplateFileBytes))
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// e2bStep is E2B's TemplateStep.
type e2bStep struct {
	Type      string
	Args      []string
	FilesHash string
	Force     *bool
}

// buildStart is E2B's TemplateBuildStartV2.
type buildStart struct {
	Force             *bool
	FromImage         string
	FromTemplate      string
	FromImageRegistry bool // present
	StartCmd          string
	ReadyCmd          string
	Steps             []e2bStep
}

func (b *buildStart) decode(r *http.Request) error {
	return decodeObject(r.Body, map[string]field{
		"force":             boolField(&b.Force),
		"fromImage":         stringField(&b.FromImage, maxNameLen),
		"fromTemplate":      stringField(&b.FromTemplate, maxNameLen),
		"fromImageRegistry": objectField(&b.FromImageRegistry, nil),
		"startCmd":          stringField(&b.StartCmd, core.MaxTemplateRunBytes),
		"readyCmd":          stringField(&b.ReadyCmd, core.MaxTemplateRunBytes),
		"steps": arrayField(core.MaxTemplateSteps, func(i int) field {
			return func(jb *jsonBody, name string) error {
				var st e2bStep
				present := false
				if err := objectField(&present, map[string]field{
					"type":      stringField(&st.Type, 16),
					"args":      stringListField(&st.Args, 2*core.MaxTemplatePackages, core.MaxTemplateRunBytes),
					"filesHash": stringField(&st.FilesHash, 128),
					"force":     boolField(&st.Force),
				})(jb, name); err != nil {
					return err
				}
				if !present {
					return badRequest(name + " is null; want {type, args}")
				}
				b.Steps = append(b.Steps, st)
				return nil
			}
		}),
	})
}

// aptInstallRE is the command the SDK's aptInstall sends as a RUN step
// (as root): it becomes the domain's Apt step, which installs from the
// host's Debian mirror, as the build has no network.
var aptInstallRE = regexp.MustCompile(`^apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y (?:--no-install-recommends )?(?:--fix-missing )?([^&|;<>$` + "`" + `\\'"]+)$`)

// templateUser maps an E2B user to the domain's: "root", and "user" (the
// sandbox's user; "sandbox" and uid 1000 name it too).
func templateUser(what, u string) (string, error) {
	switch u {
	case "root", "0":
		return core.TemplateUserRoot, nil
	case "user", "sandbox", "1000":
		return core.TemplateUserSandbox, nil
	}
	return "", badRequest(fmt.Sprintf("%s %q: sandboxd's templates have two users, root and user (the sandbox's, uid 1000)", what, sanitizeHeader(u)))
}

// isGlob reports whether a COPY source is a pattern.
func isGlob(src string) bool { return strings.ContainsAny(src, "*?[{") }

// templateSpec translates a build's body into the domain's spec, with
// the SDK's step number of each of its steps (buildEntry.stepOf).
//
// Steps run as root unless a USER step or a step's own user says
// otherwise (the domain's default, which the SDK's aptInstall and
// pip/npm global installs name explicitly); a RUN step's own user holds
// for it alone: the door inserts User steps where the user changes and
// back. A COPY's files belong to its user, else to the current one.
func templateSpec(b buildStart) (core.TemplateSpec, []int, error) {
	var spec core.TemplateSpec
	var stepOf []int
	switch {
	case b.StartCmd != "":
		return spec, nil, badRequest("startCmd: a start command is not supported by sandboxd (a sandbox runs sandboxd's driver, not a template's process); start it from the sandbox with commands.run")
	case b.ReadyCmd != "":
		return spec, nil, badRequest("readyCmd: a ready command is not supported by sandboxd (templates have no start command to wait for)")
	case b.FromImageRegistry:
		return spec, nil, badRequest("fromImageRegistry: sandboxd builds templates offline and uses no registry")
	case b.FromImage != "" && b.FromTemplate != "":
		return spec, nil, badRequest("give fromImage or fromTemplate, not both")
	case b.FromImage != "" && b.FromImage != e2bBaseImage && b.FromImage != e2bBaseImage+":latest":
		return spec, nil, badRequest(fmt.Sprintf("fromImage %q: sandboxd builds templates offline and pulls no image from a registry; build from its sandbox image (fromBaseImage(), i.e. %q) or from another of your templates (fromTemplate)", sanitizeHeader(b.FromImage), e2bBaseImage))
	case b.FromTemplate != "":
		base, err := splitTag(b.FromTemplate)
		if err != nil {
			return spec, nil, err
		}
		if !slices.Contains(templates, base) {
			spec.Base = base
		}
	}
	cur, eff := core.TemplateUserRoot, core.TemplateUserRoot // the spec's user, and the one in force
	add := func(i int, st core.TemplateStep) {
		spec.Steps = append(spec.Steps, st)
		stepOf = append(stepOf, i+1)
	}
	for i, st := range b.Steps {
		name := fmt.Sprintf("steps[%d] (%s)", i, sanitizeHeader(st.Type))
		switch strings.ToUpper(st.Type) {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 {
				return spec, nil, badRequest(name + ": want args [command] or [command, user]")
			}
			want := cur
			if len(st.Args) == 2 && st.Args[1] != "" {
				u, err := templateUser(name+": user", st.Args[1])
				if err != nil {
					return spec, nil, err
				}
				want = u
			}
			if m := aptInstallRE.FindStringSubmatch(st.Args[0]); m != nil && want == core.TemplateUserRoot {
				add(i, core.TemplateStep{Apt: strings.Fields(m[1])})
				continue
			}
			if want != eff {
				add(i, core.TemplateStep{User: want})
				eff = want
			}
			add(i, core.TemplateStep{Run: st.Args[0]})
		case "COPY":
			if len(st.Args) < 2 || len(st.Args) > 4 {
				return spec, nil, badRequest(name + ": want args [src, dest, user?, mode?]")
			}
			if st.FilesHash == "" {
				return spec, nil, badRequest(name + ": filesHash is missing (the SDK computes it)")
			}
			if isGlob(st.Args[0]) {
				return spec, nil, badRequest(fmt.Sprintf("%s: source %q is a pattern; sandboxd copies a file or a directory (copy each, or the directory holding them)", name, sanitizeHeader(st.Args[0])))
			}
			src := st.Args[0]
			if src != "" {
				src = path.Clean(src) // "dir/" and "./f" as the archive names them; core refuses what leaves it
			}
			c := &core.TemplateCopy{Archive: st.FilesHash, Src: src, Dest: st.Args[1], Owner: cur}
			if len(st.Args) > 2 && st.Args[2] != "" {
				u, err := templateUser(name+": user", st.Args[2])
				if err != nil {
					return spec, nil, err
				}
				c.Owner = u
			}
			if len(st.Args) > 3 && st.Args[3] != "" {
				m, err := strconv.ParseUint(st.Args[3], 8, 32)
				if err != nil || m > 0o777 {
					return spec, nil, badRequest(fmt.Sprintf("%s: mode %q: want permission bits in octal (e.g. 0644)", name, sanitizeHeader(st.Args[3])))
				}
				c.Mode = uint32(m)
			}
			if c.Owner == core.TemplateUserRoot {
				c.Owner = ""
			}
			add(i, core.TemplateStep{Copy: c})
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return spec, nil, badRequest(name + ": want args [name, value, name, value…]")
			}
			env := make(map[string]string, len(st.Args)/2)
			for j := 0; j < len(st.Args); j += 2 {
				env[st.Args[j]] = st.Args[j+1]
			}
			add(i, core.TemplateStep{Env: env})
		case "WORKDIR":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return spec, nil, badRequest(name + ": want args [path]")
			}
			add(i, core.TemplateStep{Workdir: st.Args[0]})
		case "USER":
			if len(st.Args) != 1 {
				return spec, nil, badRequest(name + ": want args [user]")
			}
			u, err := templateUser(name, st.Args[0])
			if err != nil {
				return spec, nil, err
			}
			cur = u // in force from the next RUN step
		default:
			return spec, nil, badRequest(fmt.Sprintf("%s: step type %q is not supported; sandboxd builds COPY, ENV, RUN, USER and WORKDIR steps", name, sanitizeHeader(st.Type)))
		}
	}
	if len(spec.Steps) == 0 {
		return spec, nil, badRequest("the template has no steps; add at least one (e.g. runCmd, aptInstall, copy)")
	}
	return spec, stepOf, nil
}

// forceOf is a build's force: the body's, or any step's (skipCache()
// forces the steps after it; the domain builds a spec whole).
func forceOf(b buildStart) bool {
	f := b.Force != nil && *b.Force
	for _, st := range b.Steps {
		f = f || (st.Force != nil && *st.Force)
	}
	return f
}

// lookupBuild returns the caller's remembered build id, if any.
func (s *Server) lookupBuild(ctx context.Context, id string) (buildEntry, bool) {
	it := s.builds.Get(id)
	if it == nil || it.IsExpired() {
		return buildEntry{}, false
	}
	e := it.Value()
	return e, e.tenant == core.CallerOf(ctx).Tenant
}

func buildNotFound(id string) error {
	return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("build %q not found", sanitizeHeader(id))}
}

// startBuild answers POST /v2/templates/{templateID}/builds/{buildID}
// (E2B's TemplateBuildStartV2): the spec translated (templateSpec) and
// its build started; 202 at once, as E2B answers (the SDK then polls the
// status).
func (s *Server) startBuild(w http.ResponseWriter, r *http.Request) {
	var b buildStart
	if err := b.decode(r); err != nil {
		s.writeError(w, r, "start build", err)
		return
	}
	id := r.PathValue("buildID")
	name, err := s.templateName(r.Context(), r.PathValue("templateID"))
	if err != nil {
		s.writeError(w, r, "start build", err)
		return
	}
	if e, ok := s.lookupBuild(r.Context(), id); ok && (e.name != name || e.version != 0) {
		s.writeError(w, r, "start build", badRequest(fmt.Sprintf("build %s is not a new build of %s; request one (POST /v3/templates)", id, name)))
		return
	} else if !ok && s.builds.Has(id) {
		s.writeError(w, r, "start build", buildNotFound(id)) // another tenant's
		return
	} else if !ok && uuid.Validate(id) != nil {
		// Not one the door remembers (a restart between the calls is
		// allowed); a build ID is a UUID all the same.
		s.writeError(w, r, "start build", badRequest(fmt.Sprintf("build ID %q: want the UUID POST /v3/templates gave", sanitizeHeader(id))))
		return
	}
	spec, stepOf, err := templateSpec(b)
	if err != nil {
		s.writeError(w, r, "start build", err)
		return
	}
	t, v, err := s.m.BuildTemplate(r.Context(), name, spec, forceOf(b))
	if err != nil {
		s.writeError(w, r, "start build", err)
		return
	}
	s.builds.Set(id, buildEntry{tenant: core.CallerOf(r.Context()).Tenant, name: t.Name, templateID: t.ID, version: v.Version,
		stepOf: stepOf}, ttlcache.DefaultTTL)
	w.WriteHeader(http.StatusAccepted)
}

// e2bLogEntry is E2B's BuildLogEntry.
type e2bLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
}

// e2bBuildReason is E2B's BuildStatusReason.
type e2bBuildReason struct {
	Message    string        `json:"message"`
	Step       string        `json:"step,omitempty"`
	LogEntries []e2bLogEntry `json:"logEntries"`
}

// e2bBuildInfo is E2B's TemplateBuildInfo.
type e2bBuildInfo struct {
	TemplateID string          `json:"templateID"`
	BuildID    string          `json:"buildID"`
	Status     string          `json:"status"`
	LogEntries []e2bLogEntry   `json:"logEntries"`
	Logs       []string        `json:"logs"`
	Reason     *e2bBuildReason `json:"reason,omitempty"`
}

// e2bBuildStatus is E2B's name for a version's state: the SDK's
// waitForBuildFinish polls while "building" (or "waiting") and ends at
// "ready" or "error".
func e2bBuildStatus(st core.TemplateState) string {
	switch st {
	case core.TemplateReady:
		return "ready"
	case core.TemplateFailed:
		return "error"
	}
	return "building"
}

// logLevels are E2B's levels, least severe first; the domain's build log
// lines are all "info".
var logLevels = []string{"debug", "info", "warn", "error"}

// stepRE finds the failing step in a failed build's reason ("step 3: …").
var stepRE = regexp.MustCompile(`\bstep (\d+)\b`)

// buildStatus answers GET /templates/{templateID}/builds/{buildID}/status
// ?logsOffset=N&level=: the build's state and its log's lines after the
// first N (at most core.MaxTemplateLogPage of them; the SDK adds up what
// it got, and polls until a finished build has no more), filtered by
// level. A failed build's reason names the SDK's step when the domain's
// names its own.
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var offset int64
	if v := q.Get("logsOffset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.writeError(w, r, "build status", badRequest(fmt.Sprintf("logsOffset: want a whole number ≥ 0, got %q", sanitizeHeader(v))))
			return
		}
		offset = n
	}
	level := q.Get("level")
	if level != "" && !slices.Contains(logLevels, level) {
		s.writeError(w, r, "build status", badRequest(fmt.Sprintf("level %q: want one of %s", sanitizeHeader(level), strings.Join(logLevels, ", "))))
		return
	}
	ref, id := r.PathValue("templateID"), r.PathValue("buildID")
	e, ok := s.lookupBuild(r.Context(), id)
	if ok && ref != e.name && ref != e.templateID {
		ok = false
	}
	if ok && e.version == 0 {
		// Requested, not started.
		writeJSON(w, http.StatusOK, e2bBuildInfo{TemplateID: ref, BuildID: id, Status: "waiting", LogEntries: []e2bLogEntry{}, Logs: []string{}})
		return
	}
	if !ok {
		var err error
		if e, err = s.forgottenBuild(r.Context(), ref, id); err != nil {
			s.writeError(w, r, "build status", err)
			return
		}
	}
	events, v, err := s.m.TemplateBuildLog(r.Context(), cmpOr(e.templateID, e.name), e.version, offset, core.MaxTemplateLogPage)
	if err != nil {
		s.writeError(w, r, "build status", err)
		return
	}
	out := e2bBuildInfo{TemplateID: ref, BuildID: id, Status: e2bBuildStatus(v.State), LogEntries: []e2bLogEntry{}, Logs: []string{}}
	minLevel := max(slices.Index(logLevels, level), 0)
	for _, ev := range events {
		if ev.Done != nil || minLevel > 1 {
			continue
		}
		out.LogEntries = append(out.LogEntries, e2bLogEntry{Timestamp: ev.Time.UTC(), Level: "info", Message: ev.Line})
		out.Logs = append(out.Logs, ev.Line)
	}
	if v.State == core.TemplateFailed {
		reason := &e2bBuildReason{Message: cmpOr(v.Reason, "the build failed"), LogEntries: []e2bLogEntry{}}
		if m := stepRE.FindStringSubmatch(v.Reason); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n >= 1 && n <= len(e.stepOf) {
				reason.Step = strconv.Itoa(e.stepOf[n-1])
			}
		}
		out.Reason = reason
	}
	writeJSON(w, http.StatusOK, out)
}

// forgottenBuild is a build the door does not remember (a restart, or
// older than a day): the template's version whose derived ID id is, else
// its latest.
func (s *Server) forgottenBuild(ctx context.Context, ref, id string) (buildEntry, error) {
	t, err := s.m.GetTemplate(ctx, ref)
	if err != nil {
		return buildEntry{}, err
	}
	latest, ok := t.Latest()
	if !ok {
		return buildEntry{}, buildNotFound(id)
	}
	e := buildEntry{tenant: t.Tenant, name: t.Name, templateID: t.ID, version: latest.Version}
	for _, v := range t.Versions {
		if s.templateBuildID(t.Tenant, t.ID, v.Version) == id {
			e.version = v.Version
		}
	}
	return e, nil
}

// e2bTemplate is E2B's Template (a list's element).
type e2bTemplate struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	BuildStatus   string     `json:"buildStatus"`
	BuildCount    int        `json:"buildCount"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int        `json:"memoryMB"`
	DiskSizeMB    int        `json:"diskSizeMB"`
	EnvdVersion   string     `json:"envdVersion"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *string    `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int        `json:"spawnCount"`
}

// e2bTemplateBuild is E2B's TemplateBuild.
type e2bTemplateBuild struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
	CPUCount    int        `json:"cpuCount"`
	MemoryMB    int        `json:"memoryMB"`
	EnvdVersion string     `json:"envdVersion"`
}

// e2bTemplateWithBuilds is E2B's TemplateWithBuilds.
type e2bTemplateWithBuilds struct {
	TemplateID    string             `json:"templateID"`
	Public        bool               `json:"public"`
	Aliases       []string           `json:"aliases"`
	Names         []string           `json:"names"`
	CreatedAt     time.Time          `json:"createdAt"`
	UpdatedAt     time.Time          `json:"updatedAt"`
	LastSpawnedAt *time.Time         `json:"lastSpawnedAt"`
	SpawnCount    int                `json:"spawnCount"`
	Builds        []e2bTemplateBuild `json:"builds"`
}

// updatedAt is when a template last changed: its newest version's end
// (or start), else its creation.
func updatedAt(t core.Template) time.Time {
	if v, ok := t.Latest(); ok {
		return cmpTime(v.FinishedAt, v.StartedAt).UTC()
	}
	return t.CreatedAt.UTC()
}

func cmpTime(a, b time.Time) time.Time {
	if !a.IsZero() {
		return a
	}
	return b
}

func (s *Server) templateOf(t core.Template) e2bTemplate {
	out := e2bTemplate{TemplateID: t.ID, BuildStatus: "waiting", BuildCount: len(t.Versions), CPUCount: 1, EnvdVersion: EnvdVersion,
		Aliases: []string{t.Name}, Names: []string{t.Name}, CreatedAt: t.CreatedAt.UTC(), UpdatedAt: updatedAt(t)}
	if v, ok := t.Latest(); ok {
		out.BuildStatus = e2bBuildStatus(v.State)
	}
	if v, ok := t.Current(); ok {
		out.BuildID = s.templateBuildID(t.Tenant, t.ID, v.Version)
	}
	return out
}

// listTemplates answers GET /templates: the caller's tenant's templates
// (an admin key lists its own tenant here, as with sandboxes).
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.m.ListTemplates(r.Context(), s.ownTenant(r.Context()))
	if err != nil {
		s.writeError(w, r, "list templates", err)
		return
	}
	out := make([]e2bTemplate, 0, len(ts))
	for _, t := range ts {
		out = append(out, s.templateOf(t))
	}
	writeJSON(w, http.StatusOK, out)
}

// getTemplate answers GET /templates/{templateID}: the template and its
// builds (the domain's versions, newest first as E2B lists them).
func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.m.GetTemplate(r.Context(), r.PathValue("templateID"))
	if err != nil {
		s.writeError(w, r, "get template", err)
		return
	}
	out := e2bTemplateWithBuilds{TemplateID: t.ID, Aliases: []string{t.Name}, Names: []string{t.Name},
		CreatedAt: t.CreatedAt.UTC(), UpdatedAt: updatedAt(t), Builds: []e2bTemplateBuild{}}
	for i := len(t.Versions) - 1; i >= 0; i-- {
		v := t.Versions[i]
		b := e2bTemplateBuild{BuildID: s.templateBuildID(t.Tenant, t.ID, v.Version), Status: e2bBuildStatus(v.State),
			CreatedAt: v.StartedAt.UTC(), UpdatedAt: cmpTime(v.FinishedAt, v.StartedAt).UTC(), CPUCount: 1, EnvdVersion: EnvdVersion}
		if !v.FinishedAt.IsZero() {
			f := v.FinishedAt.UTC()
			b.FinishedAt = &f
		}
		out.Builds = append(out.Builds, b)
	}
	writeJSON(w, http.StatusOK, out)
}

// templateSub answers GET /templates/{a}/{b}: E2B's alias lookup
// (/templates/aliases/{alias}) and a template's tags
// (/templates/{templateID}/tags), one route as the two patterns overlap.
func (s *Server) templateSub(w http.ResponseWriter, r *http.Request) {
	a, b := r.PathValue("a"), r.PathValue("b")
	switch {
	case a == "aliases":
		s.templateAlias(w, r, b)
	case b == "tags":
		s.templateTags(w, r, a)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound,
			"message": fmt.Sprintf("%s %s is not part of sandboxd's E2B API", r.Method, sanitizeHeader(r.URL.Path))})
	}
}

// templateAlias answers GET /templates/aliases/{alias} (Template.exists):
// the template of that name, or 404, which exists() turns into false.
// Another tenant's template is not found, as E2B answers 403 only for a
// public name of another team (which sandboxd does not have).
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request, alias string) {
	name, err := splitTag(alias)
	var t core.Template
	if err == nil {
		t, err = s.m.GetTemplate(r.Context(), name)
	}
	if err != nil {
		s.writeError(w, r, "template alias", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"templateID": t.ID, "public": false})
}

// e2bTemplateTag is E2B's TemplateTag.
type e2bTemplateTag struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// templateTags answers GET /templates/{templateID}/tags
// (Template.getTags): the default tag, on the latest ready version, once
// there is one.
func (s *Server) templateTags(w http.ResponseWriter, r *http.Request, ref string) {
	t, err := s.m.GetTemplate(r.Context(), ref)
	if err != nil {
		s.writeError(w, r, "template tags", err)
		return
	}
	out := []e2bTemplateTag{}
	if v, ok := t.Current(); ok {
		out = append(out, e2bTemplateTag{Tag: defaultTag, BuildID: s.templateBuildID(t.Tenant, t.ID, v.Version),
			CreatedAt: cmpTime(v.FinishedAt, v.StartedAt).UTC()})
	}
	writeJSON(w, http.StatusOK, out)
}

// templateTagsUnsupported answers POST and DELETE /templates/tags
// (Template.assignTags, removeTags).
func (s *Server) templateTagsUnsupported(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, "template tags", badRequest(fmt.Sprintf("tags are not supported by sandboxd: a template's sandboxes get its latest ready build (E2B's %q tag); build again to change it", defaultTag)))
}

// deleteTemplate answers DELETE /templates/{id}: the SDK's deleteSnapshot
// (a snapshot's ID or name) and the CLI's template delete (a template's):
// a snapshot ID is a snapshot, a template ID a template, and a name the
// tenant's snapshot of that name, else its template.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("id")
	var err error
	switch {
	case core.IsTemplateID(ref):
		err = s.m.DeleteTemplate(r.Context(), ref)
	case core.IsSnapshotID(ref):
		err = s.m.DeleteSnapshot(r.Context(), ref)
	default:
		err = s.m.DeleteSnapshot(r.Context(), ref)
		if errors.Is(err, core.ErrNotFound) && core.ValidateTemplateName(ref) == nil {
			if terr := s.m.DeleteTemplate(r.Context(), ref); !errors.Is(terr, core.ErrNotFound) {
				err = terr
			}
		}
	}
	if err != nil {
		s.writeError(w, r, "delete template", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
