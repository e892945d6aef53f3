package e2bapi

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// templateKey is the metadata key that keeps the template a sandbox was
// created from; it is hidden from the metadata the SDK sees.
const templateKey = "e2b:template"

// templates are the E2B template IDs this door serves, all with the
// server's image.
var templates = []string{"code-interpreter-v1", "base", "code-interpreter", "code-interpreter-beta"}

// listLimit bounds one page of GET /v2/sandboxes.
const listLimit = 100

func (s *Server) controlMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		mux.HandleFunc("POST "+p, s.authed(s.create))
		mux.HandleFunc("GET "+p, s.authed(s.list))
		mux.HandleFunc("POST "+p+"/{id}/connect", s.authed(s.connect))
	}
	mux.HandleFunc("POST /sandboxes/{id}/resume", s.authed(s.connect))
	mux.HandleFunc("GET /sandboxes/{id}", s.authed(s.info))
	mux.HandleFunc("DELETE /sandboxes/{id}", s.authed(s.kill))
	mux.HandleFunc("POST /sandboxes/{id}/timeout", s.authed(s.setTimeout))
	mux.HandleFunc("POST /sandboxes/{id}/refreshes", s.authed(s.refresh))
	mux.HandleFunc("POST /sandboxes/{id}/pause", s.authed(s.pause))
	mux.HandleFunc("PUT /sandboxes/{id}/network", s.authed(s.updateNetwork))
	mux.HandleFunc("GET /sandboxes/{id}/metrics", s.authed(s.metrics))
	mux.HandleFunc("POST /sandboxes/{id}/snapshots", s.authed(s.createSnapshot))
	mux.HandleFunc("GET /snapshots", s.authed(s.listSnapshots))
	mux.HandleFunc("DELETE /templates/{id}", s.authed(s.deleteTemplate))
	mux.HandleFunc("POST /v3/templates", s.authed(s.requestBuild))
	mux.HandleFunc("GET /templates", s.authed(s.listTemplates))
	mux.HandleFunc("GET /templates/{templateID}", s.authed(s.getTemplate))
	mux.HandleFunc("GET /templates/{a}/{b}", s.authed(s.templateSub))
	mux.HandleFunc("GET /templates/{templateID}/files/{hash}", s.authed(s.fileUploadLink))
	mux.HandleFunc("PUT /templatefiles/{hash}", s.uploadTemplateFile)
	mux.HandleFunc("POST /v2/templates/{templateID}/builds/{buildID}", s.authedBody(maxTemplateBody, s.startBuild))
	mux.HandleFunc("GET /templates/{templateID}/builds/{buildID}/status", s.authed(s.buildStatus))
	mux.HandleFunc("POST /templates/tags", s.authed(s.templateTagsUnsupported))
	mux.HandleFunc("DELETE /templates/tags", s.authed(s.templateTagsUnsupported))
	mux.HandleFunc("POST /sandboxes/{id}/fork", s.authed(s.fork))
	mux.HandleFunc("POST /volumes", s.authed(s.createVolume))
	mux.HandleFunc("GET /volumes", s.authed(s.listVolumes))
	mux.HandleFunc("GET /volumes/{volumeID}", s.authed(s.getVolume))
	mux.HandleFunc("DELETE /volumes/{volumeID}", s.authed(s.deleteVolume))
	mux.HandleFunc("GET /volumecontent/{volumeID}/dir", s.volumeContent(decodedAsRead, s.listVolumeDir))
	mux.HandleFunc("POST /volumecontent/{volumeID}/dir", s.volumeContent(decodedAsRead, s.makeVolumeDir))
	mux.HandleFunc("GET /volumecontent/{volumeID}/path", s.volumeContent(decodedAsRead, s.statVolumePath))
	mux.HandleFunc("PATCH /volumecontent/{volumeID}/path", s.volumeContent(decodedAsRead, s.updateVolumePath))
	mux.HandleFunc("DELETE /volumecontent/{volumeID}/path", s.volumeContent(decodedAsRead, s.removeVolumePath))
	mux.HandleFunc("GET /volumecontent/{volumeID}/file", s.volumeContent(decodedAsRead, s.readVolumeFile))
	mux.HandleFunc("PUT /volumecontent/{volumeID}/file", s.volumeContent(streamed, s.writeVolumeFile))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound,
			"message": fmt.Sprintf("%s %s is not part of sandboxd's E2B API", r.Method, sanitizeHeader(r.URL.Path))})
	})
	return mux
}

// authed authenticates by X-API-KEY, then bounds and admits the body
// (which nothing read before: a refusal does not wait for it, and a body
// declared past its bound is refused before 100 Continue).
func (s *Server) authed(h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return s.authedBody(maxControlBody, h)
}

// authedBody is authed with a body of at most limit bytes.
func (s *Server) authedBody(limit int64, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := s.callerFor(r)
		if err != nil {
			s.writeError(w, r, "auth", err)
			return
		}
		r = r.WithContext(core.WithCaller(r.Context(), c))
		if !s.limitBody(w, r, limit) || !s.admit(w, r, c.Tenant, decodedAsRead) {
			return
		}
		h(w, r)
	}
}

type createRequest struct {
	TemplateID string
	Metadata   map[string]string
	EnvVars    map[string]string
	Timeout    *int64 // seconds
	AutoPause  *bool
	Secure     *bool
	// Network is E2B's SandboxNetworkConfig (network.go), nil when absent;
	// AllowInternetAccess its allow_internet_access.
	Network             *e2bNetwork
	AllowInternetAccess *bool
	// VolumeMounts are E2B's volumeMounts [{name, path}] (volumes.go).
	VolumeMounts []core.VolumeMount
}

// decode decodes a create body: the maps are bounded as they are read.
func (req *createRequest) decode(r *http.Request) error {
	return decodeObject(r.Body, map[string]field{
		"templateID": stringField(&req.TemplateID, maxNameLen),
		"metadata":   mapField(&req.Metadata, "entries", maxMetadataEntries, maxMetadataBytes),
		"envVars":    mapField(&req.EnvVars, "variables", ioproto.MaxEnvVars, ioproto.MaxEnvBytes),
		"timeout":    intField(&req.Timeout),
		"autoPause":  boolField(&req.AutoPause),
		"secure":     boolField(&req.Secure),
		"network": func(b *jsonBody, name string) error {
			n, present := &e2bNetwork{}, false
			if err := objectField(&present, n.fields(false))(b, name); err != nil {
				return err
			}
			if present {
				req.Network = n
			}
			return nil
		},
		"allow_internet_access": boolField(&req.AllowInternetAccess),
		"volumeMounts":          volumeMountsField(&req.VolumeMounts),
	})
}

// sandboxCreated is E2B's answer to create and connect.
type sandboxCreated struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	Alias              string  `json:"alias,omitempty"`
}

const clientID = "sandboxd"

// created answers create and connect. With the ports front, the sandbox's
// traffic token is the front's (the SDK sends it to getHost's URLs and to
// the interpreter's contexts) and domain the front's, so that getHost's
// URL is the front's Host form; without it, the traffic token is the
// access token, as before the front (nothing else takes it).
func (s *Server) created(sb core.Sandbox) sandboxCreated {
	tok := s.accessToken(sb.ID)
	c := sandboxCreated{SandboxID: sb.ID, TemplateID: templateOf(sb), Alias: aliasOf(sb), ClientID: clientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: tok, TrafficAccessToken: tok, Domain: s.domain()}
	if s.front != nil {
		c.TrafficAccessToken = s.front.Token(sb.ID)
	}
	return c
}

// domain is the front's domain for E2B's sandboxDomain (nil without one:
// the SDK then keeps its own, E2B_DOMAIN).
func (s *Server) domain() *string {
	if s.front == nil || s.front.Domain() == "" {
		return nil
	}
	d := s.front.Domain()
	return &d
}

// templateOf is the templateID E2B shows for sb: its template's ID when
// it was created from one of the tenant's templates, else what its create
// named (an E2B template this door serves, or a snapshot).
func templateOf(sb core.Sandbox) string {
	if sb.Template != "" {
		return sb.Template
	}
	if t := sb.Metadata[templateKey]; t != "" {
		return t
	}
	return templates[0]
}

// aliasOf is the alias E2B shows for sb: the name its create gave (a
// template's ID when it was given that).
func aliasOf(sb core.Sandbox) string {
	if sb.Template != "" {
		return cmpOr(sb.Metadata[templateKey], sb.Template)
	}
	return ""
}

// timeoutOf converts E2B's timeout in seconds (nil: the server's default).
func timeoutOf(sec *int64) (time.Duration, error) {
	if sec == nil || *sec == 0 {
		return 0, nil
	}
	if *sec < 0 || *sec > int64(365*24*time.Hour/time.Second) {
		return 0, badRequest(fmt.Sprintf("timeout %d s is out of range", *sec))
	}
	return time.Duration(*sec) * time.Second, nil
}

// newUserID is a fresh sandboxd user for one Sandbox.create().
func newUserID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return userPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := req.decode(r); err != nil {
		s.writeError(w, r, "create", err)
		return
	}
	tpl := cmpOr(req.TemplateID, templates[0])
	fromSnapshot, fromTemplate, err := s.sandboxSource(r.Context(), tpl)
	if err != nil {
		s.writeError(w, r, "create", err)
		return
	}
	// E2B kills a sandbox at its timeout unless lifecycle.onTimeout is
	// "pause", whatever sandboxd's own default (--on-idle) is.
	onIdle := core.OnIdleDelete
	if req.AutoPause != nil && *req.AutoPause {
		onIdle = core.OnIdleHibernate
	}
	d, err := timeoutOf(req.Timeout)
	if err != nil {
		s.writeError(w, r, "create", err)
		return
	}
	if _, ok := req.Metadata[templateKey]; ok {
		s.writeError(w, r, "create", badRequest("metadata key "+templateKey+" is reserved"))
		return
	}
	md := make(map[string]string, len(req.Metadata)+1)
	for k, v := range req.Metadata {
		md[k] = v
	}
	md[templateKey] = tpl
	opts := core.Options{Env: req.EnvVars, Metadata: md, IdleTimeout: d, OnIdle: onIdle, FromSnapshot: fromSnapshot,
		Template: fromTemplate, Volumes: req.VolumeMounts}
	switch {
	case req.Network != nil:
		p := req.Network.policy(req.AllowInternetAccess)
		opts.NetworkPolicy = &p
	case req.AllowInternetAccess != nil && *req.AllowInternetAccess:
		opts.Network = true // the server's default policy
	}
	res, err := s.m.Acquire(r.Context(), newUserID(), opts)
	switch {
	case err != nil && fromSnapshot != "" && errors.Is(err, core.ErrNotFound):
		err = &apiError{status: http.StatusBadRequest,
			msg: fmt.Sprintf("template %q is not served here; sandboxd serves %s (all with its sandbox image), and the templates and snapshots of your team, and none has that name", sanitizeHeader(tpl), strings.Join(templates, ", "))}
	case err != nil && fromSnapshot != "" && fromTemplate == "" && core.IsUnsupported(err):
		// A backend with neither templates nor snapshots (kubernetes):
		// the name is none of the templates served, which is what the
		// caller needs to hear first.
		err = &apiError{status: http.StatusBadRequest,
			msg: fmt.Sprintf("template %q is not served here; sandboxd serves %s (all with its sandbox image); %v", sanitizeHeader(tpl), strings.Join(templates, ", "), err)}
	}
	if err != nil {
		s.writeError(w, r, "create", err)
		return
	}
	writeJSON(w, http.StatusCreated, s.created(res.Sandbox))
}

// sandboxSource reads create's templateID: one of the E2B templates this
// door serves with the server's image (neither result set), a template
// of the tenant (its ID, or a name it has; ":default" is its only tag),
// or else a snapshot (its ID or name), as E2B's Sandbox.create(snapshot)
// starts from one. A backend without templates (core.Unsupported) has
// only snapshots.
func (s *Server) sandboxSource(ctx context.Context, tpl string) (fromSnapshot, fromTemplate string, err error) {
	if slices.Contains(templates, tpl) {
		return "", "", nil
	}
	name, err := splitTag(tpl)
	if err != nil {
		return "", "", err
	}
	switch {
	case core.IsTemplateID(name):
		return "", name, nil
	case core.IsSnapshotID(name):
		return name, "", nil
	case core.ValidateSnapshotRef(name) != nil && core.ValidateTemplateName(name) != nil:
		return "", "", &apiError{status: http.StatusBadRequest,
			msg: fmt.Sprintf("template %q is not served here; sandboxd serves %s (all with its sandbox image), and the templates and snapshots of your team", sanitizeHeader(tpl), strings.Join(templates, ", "))}
	}
	_, err = s.m.GetTemplate(ctx, name)
	switch c := core.ClassOf(err); {
	case err == nil:
		return "", name, nil
	case c == core.ErrNotFound, c == core.ErrNotImplemented, c == core.ErrFailedPrecondition, c == core.ErrInvalidArgument:
		return name, "", nil
	}
	return "", "", err
}

type timeoutRequest struct {
	Timeout *int64
}

func (req *timeoutRequest) decode(r *http.Request) error {
	return decodeObject(r.Body, map[string]field{"timeout": intField(&req.Timeout)})
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := req.decode(r); err != nil {
		s.writeError(w, r, "connect", err)
		return
	}
	d, err := timeoutOf(req.Timeout)
	if err != nil {
		s.writeError(w, r, "connect", err)
		return
	}
	sb, err := s.visible(r.Context(), r.PathValue("id"))
	if err == nil && sb.State == core.StateHibernated {
		// Connect resumes a paused sandbox: a wake, with its state back at
		// the best level its snapshot has (Sandbox.LastWake says which).
		sb, _, err = s.m.Wake(r.Context(), sb.ID)
	}
	if err != nil {
		s.writeError(w, r, "connect", err)
		return
	}
	if d > 0 {
		if sb, err = s.m.SetTimeout(r.Context(), sb.ID, d); err != nil {
			s.writeError(w, r, "connect", err)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.created(sb))
}

// visible gets a sandbox the caller sees, running or hibernated (E2B's
// "paused"), without waking it; a dead one is not found, as E2B has no
// dead sandboxes.
func (s *Server) visible(ctx context.Context, id string) (core.Sandbox, error) {
	sb, err := s.m.Get(ctx, id)
	if err != nil {
		return sb, err
	}
	if sb.State != core.StateRunning && sb.State != core.StateHibernated {
		return sb, &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("sandbox %s is not running: %s", id, sb.StateReason)}
	}
	return sb, nil
}

// e2bState is E2B's name for a sandbox's state.
func e2bState(st core.State) string {
	if st == core.StateHibernated {
		return "paused"
	}
	return "running"
}

// sandboxInfo is E2B's SandboxDetail / ListedSandbox.
type sandboxInfo struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	CPUCount        int64             `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain"`
	// AllowInternetAccess is whether the sandbox has network at all;
	// Network its policy, redacted (network.go).
	AllowInternetAccess bool            `json:"allowInternetAccess"`
	Network             *e2bNetworkInfo `json:"network,omitempty"`
	// VolumeMounts are its volumes by name (volumes.go).
	VolumeMounts []e2bVolumeMount `json:"volumeMounts"`
}

// infoOf is sb's info; names are the caller's volumes' names by ID
// (volumeNames).
func (s *Server) infoOf(sb core.Sandbox, names map[string]string) sandboxInfo {
	md := make(map[string]string, len(sb.Metadata))
	for k, v := range sb.Metadata {
		if k != templateKey {
			md[k] = v
		}
	}
	cpus := max(sb.Limits.NanoCPUs/1e9, 1)
	return sandboxInfo{TemplateID: templateOf(sb), Alias: aliasOf(sb), SandboxID: sb.ID, ClientID: clientID, StartedAt: sb.CreatedAt,
		EndAt: sb.ExpiresAt, EnvdVersion: EnvdVersion, CPUCount: cpus, MemoryMB: sb.Limits.MemoryBytes >> 20,
		DiskSizeMB: sb.Limits.DiskBytes >> 20, Metadata: md, State: e2bState(sb.State),
		AllowInternetAccess: sb.Network, Network: networkInfoOf(sb), Domain: s.domain(),
		VolumeMounts: volumeMountsOf(sb, names)}
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	sb, err := s.visible(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, "info", err)
		return
	}
	writeJSON(w, http.StatusOK, s.infoOf(sb, s.volumeNames(r.Context(), sb)))
}

// pageOf reads a list's paging: limit (at most listLimit) and nextToken,
// the offset this server gave in X-Next-Token.
func pageOf(q url.Values) (limit, offset int, err error) {
	limit = listLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return 0, 0, badRequest("limit must be a positive number")
		}
		limit = min(n, listLimit)
	}
	if t := q.Get("nextToken"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			return 0, 0, badRequest("nextToken is not one this server gave")
		}
		offset = n
	}
	return limit, offset, nil
}

// list answers GET /v2/sandboxes: the running sandboxes this door
// created in the caller's tenant, newest first, filtered by metadata
// (metadata=k%3Dv%26…, each pair URL-encoded once more by the SDK) and
// state, paged by X-Next-Token.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter := core.ListFilter{}
	states := []string{"running", "paused"} // E2B's default: both
	if c, _ := core.CallerFrom(r.Context()); c.Admin {
		filter.Tenant = c.Tenant // an admin key lists its own tenant here, like any key
	}
	if raw := q.Get("metadata"); raw != "" {
		pairs, err := url.ParseQuery(raw)
		if err != nil {
			s.writeError(w, r, "list", badRequest("metadata is not a query string of key=value pairs: "+err.Error()))
			return
		}
		filter.Metadata = make(map[string]string, len(pairs))
		for k, vs := range pairs {
			k2, err1 := url.QueryUnescape(k)
			v2, err2 := url.QueryUnescape(vs[0])
			if err1 != nil || err2 != nil {
				s.writeError(w, r, "list", badRequest("metadata has a malformed escape"))
				return
			}
			filter.Metadata[k2] = v2
		}
	}
	if qs := q["state"]; len(qs) > 0 {
		states = nil
		for _, st := range qs {
			states = append(states, strings.Split(st, ",")...)
		}
	}
	limit, offset, err := pageOf(q)
	if err != nil {
		s.writeError(w, r, "list", err)
		return
	}
	all, err := s.m.List(r.Context(), filter)
	if err != nil {
		s.writeError(w, r, "list", err)
		return
	}
	mine := all[:0]
	for _, sb := range all {
		visible := sb.State == core.StateRunning || sb.State == core.StateHibernated
		if visible && strings.HasPrefix(sb.UserID, userPrefix) && slices.Contains(states, e2bState(sb.State)) {
			mine = append(mine, sb)
		}
	}
	slices.SortFunc(mine, func(a, b core.Sandbox) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	out := []sandboxInfo{}
	if offset < len(mine) {
		page := mine[offset:min(offset+limit, len(mine))]
		names := s.volumeNames(r.Context(), page...)
		for _, sb := range page {
			out = append(out, s.infoOf(sb, names))
		}
		if offset+limit < len(mine) {
			w.Header().Set("X-Next-Token", strconv.Itoa(offset+limit))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.m.Delete(r.Context(), id); err != nil {
		s.writeError(w, r, "kill", err)
		return
	}
	s.procs.forget(id)
	s.abandoned.forget(id)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := req.decode(r); err != nil {
		s.writeError(w, r, "timeout", err)
		return
	}
	if req.Timeout == nil || *req.Timeout <= 0 {
		s.writeError(w, r, "timeout", badRequest("timeout (seconds, > 0) is required"))
		return
	}
	d, err := timeoutOf(req.Timeout)
	if err == nil {
		_, err = s.m.SetTimeout(r.Context(), r.PathValue("id"), d)
	}
	if err != nil {
		s.writeError(w, r, "timeout", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh (the older keep-alive call) extends the sandbox by duration
// seconds, or its own timeout.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	var duration *int64
	if err := decodeObject(r.Body, map[string]field{"duration": intField(&duration)}); err != nil {
		s.writeError(w, r, "refresh", err)
		return
	}
	sb, err := s.visible(r.Context(), r.PathValue("id"))
	if err == nil {
		d := sb.IdleTimeout
		if duration != nil && *duration > 0 {
			d = time.Duration(*duration) * time.Second
		}
		if d > 0 {
			_, err = s.m.SetTimeout(r.Context(), sb.ID, d)
		}
	}
	if err != nil {
		s.writeError(w, r, "refresh", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pause hibernates the sandbox (its Python globals and files kept, its
// container gone); 409 when it is already paused, as E2B answers. The
// body's memory flag is not needed: sandboxd keeps the best level it can
// (the memory level only with sandboxd --memory-snapshots).
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	// Read (and bounded) all the same, so that the connection is kept.
	if err := decodeObject(r.Body, nil); err != nil {
		s.writeError(w, r, "pause", err)
		return
	}
	sb, err := s.visible(r.Context(), r.PathValue("id"))
	if err == nil && sb.State == core.StateHibernated {
		err = &apiError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox %s is already paused", sb.ID)}
	}
	if err == nil {
		_, err = s.m.Hibernate(r.Context(), sb.ID)
	}
	if err != nil {
		s.writeError(w, r, "pause", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// metrics answers E2B's getMetrics (GET /sandboxes/{id}/metrics?start=&end=,
// Unix seconds, both optional) with the sandbox's samples in E2B's
// SandboxMetric shape, oldest first: CPU as a percentage of the sandbox's
// CPU limit and that limit as a whole number of CPUs, disk as /workspace's.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	start, end, err := metricsWindow(r.URL.Query())
	if err != nil {
		s.writeError(w, r, "metrics", err)
		return
	}
	if _, err := s.visible(r.Context(), id); err != nil {
		s.writeError(w, r, "metrics", err)
		return
	}
	var since time.Time
	if !start.IsZero() {
		since = start.Add(-time.Nanosecond) // the domain's since is exclusive, E2B's start inclusive
	}
	samples, err := s.m.SandboxMetrics(r.Context(), id, since)
	if err != nil {
		s.writeError(w, r, "metrics", err)
		return
	}
	out := make([]e2bMetric, 0, len(samples))
	for _, m := range samples {
		if !end.IsZero() && m.Time.Truncate(time.Second).After(end) {
			continue
		}
		out = append(out, toE2BMetric(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bMetric is E2B's SandboxMetric.
type e2bMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

func toE2BMetric(m core.SandboxMetrics) e2bMetric {
	return e2bMetric{
		Timestamp:     m.Time.UTC().Format(time.RFC3339Nano),
		TimestampUnix: m.Time.Unix(),
		CPUCount:      max(int(math.Ceil(m.CPULimitCores)), 1),
		CPUUsedPct:    math.Round(m.CPUUsedPercent()*100) / 100,
		MemUsed:       m.MemoryUsedBytes,
		MemTotal:      m.MemoryLimitBytes,
		MemCache:      m.MemoryCacheBytes,
		DiskUsed:      m.Workspace.UsedBytes,
		DiskTotal:     m.Workspace.LimitBytes,
	}
}

// metricsWindow reads getMetrics' start and end (Unix seconds; absent:
// zero, no bound).
func metricsWindow(q url.Values) (start, end time.Time, err error) {
	parse := func(name string) (time.Time, error) {
		v := q.Get(name)
		if v == "" {
			return time.Time{}, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 1<<40 {
			return time.Time{}, badRequest(fmt.Sprintf("%s: want Unix seconds, got %q", name, v))
		}
		return time.Unix(n, 0), nil
	}
	if start, err = parse("start"); err != nil {
		return
	}
	end, err = parse("end")
	return
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
