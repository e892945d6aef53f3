// Package e2bapi is sandboxd's E2B-compatible front door: an HTTP server on
// which the official, unmodified E2B SDKs (npm "e2b" and
// "@e2b/code-interpreter", and the Python packages) run against sandboxd
// once E2B_API_URL and E2B_SANDBOX_URL point at it.
//
// It sits beside orchestrator/door/grpcapi and, like it, is a thin layer over the
// domain (the same Manager interface), over either backend: it translates
// E2B's three surfaces onto sandboxd's sandboxes, commands, contexts and
// files, and maps the domain's error classes to HTTP statuses and Connect
// codes in one place (errors.go; a feature the backend lacks,
// core.Unsupported, is 501 naming it). The SDK sends every request to one address; requests are
// told apart by headers, not paths (/health exists on several):
//
//   - no E2b-Sandbox-Port header: the control plane (create, connect, list,
//     get, kill, set timeout; volumes; template builds), authenticated by
//     X-API-KEY, which names a tenant through sandboxd's --auth-tokens
//     file, the volume content API (/volumecontent/), authenticated by a
//     volume's token (volumes.go), and template archive uploads
//     (/templatefiles/), by a signed URL (templates.go);
//   - E2b-Sandbox-Port 49983: envd, the in-sandbox daemon: Connect RPC
//     services process.Process and filesystem.Filesystem (envdproto/),
//     /files and /health;
//   - E2b-Sandbox-Port 49999: the code interpreter: /execute (NDJSON) and
//     /contexts.
//
// Sandbox-level requests carry the sandbox's access token (returned by
// create and connect), an HMAC of the sandbox ID under a secret kept in
// sandboxd's state directory, so tokens survive restarts and nothing per
// sandbox needs storing. Every Sandbox.create() is a new sandbox: a new
// sandboxd user ("e2b-" and a random suffix) within the key's tenant.
package e2bapi

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/jellydator/ttlcache/v3"

	"github.com/sandboxd/sandboxd/internal/httpguard"
	"github.com/sandboxd/sandboxd/internal/secretfile"
	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/filesystem/filesystemconnect"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/process/processconnect"
	"github.com/sandboxd/sandboxd/orchestrator/door/tokens"
)

// The ports the SDK names in E2b-Sandbox-Port.
const (
	EnvdPort        = "49983"
	InterpreterPort = "49999"
)

// EnvdVersion is the envd version this door claims: the SDK enables
// features by it. 0.5.7 means closing stdin (0.5.2) and octet-stream
// uploads (0.5.7); file metadata (0.6.2) and watch entries (0.6.3) are not
// offered.
const EnvdVersion = "0.5.7"

// userPrefix starts the sandboxd user ID of every sandbox this door
// creates; the E2B list shows only those.
const userPrefix = "e2b-"

// Bounds of what a client may send.
const (
	maxControlBody = 256 << 10 // create, connect, timeout bodies; /contexts
	maxExecuteBody = 8 << 20   // an /execute body
	maxRPCBody     = 8 << 20   // one Connect RPC message (decompressed)
	maxHeaderBytes = 64 << 10
	headerTimeout  = 10 * time.Second

	// A JSON body's fields: names (template, context, language) and
	// paths, and the metadata of a create. The domain has its own rules
	// (orchestrator/core: metadata is 64 entries and 16 KiB there); these
	// bound what the door holds before it asks.
	maxNameLen         = 256
	maxPathLen         = 4096
	maxMetadataEntries = 256
	maxMetadataBytes   = 64 << 10
)

// Bounds of what clients can hold of the door (internal/httpguard).
const (
	// bodyTimeout is the time a body has to arrive from when it is
	// admitted, and minBodyRate the rate that extends it: an 8 MiB body
	// has 30 s + 128 s, an upload of 256 MiB over an hour, a silent one
	// 30 s.
	bodyTimeout = 30 * time.Second
	minBodyRate = 64 << 10
	// maxBodyReads bodies larger than freeBodyBytes (or of unknown
	// length) are read at once, maxBodyReadsPerTenant of one tenant's: an
	// /execute or RPC body may be held whole while it is decoded (the
	// largest string of an /execute body, a Connect message), so these
	// bound that memory (8 × 8 MiB, twice over while decoding). Smaller
	// bodies need no place.
	maxBodyReads          = 8
	maxBodyReadsPerTenant = 2
	freeBodyBytes         = 64 << 10
	// bodyQueueWait is how long a body waits for a place before 503.
	bodyQueueWait = 10 * time.Second
	// maxConns is the most connections the door holds open (fewer when
	// sandboxd's descriptor limit is low: half of it; httpguard.ConnLimit).
	maxConns = 4096
)

// Config configures a Server.
type Config struct {
	// Tokens authenticates X-API-KEY (sandboxd's --auth-tokens). Nil: no
	// authentication; any non-empty key acts as the default tenant.
	Tokens *tokens.Set
	// Secret keys the sandboxes' access tokens (see LoadSecret).
	Secret []byte
	// Logger; nil discards.
	Logger *slog.Logger
	// Keepalive is the silence after which /execute sends a keepalive line
	// (default 5 s); streaming RPCs send theirs at the interval the SDK
	// asks for.
	Keepalive time.Duration
	// CommandTimeout bounds every command this door runs (sandboxd's
	// --max-timeout): E2B sets no server-side limit on processes or runs,
	// so they get the longest sandboxd allows. 0: sandboxd's default.
	CommandTimeout time.Duration
	// BodyTimeout is the time a request body has to arrive (extended as
	// it arrives at 64 KiB/s); 0: 30 s. Tests shorten it.
	BodyTimeout time.Duration
	// Ports is sandboxd's HTTP front for sandbox ports
	// (orchestrator/door/ports) and Front its URLs and tokens, when the
	// front runs (both or neither): a request whose Host names a port
	// (E2B's getHost, PORT-SANDBOXID.DOMAIN) and carries no
	// E2b-Sandbox-Port goes to Ports; create and connect return the
	// front's domain and the sandbox's traffic token (trafficAccessToken).
	Ports http.Handler
	Front *core.PortsFront
}

// Server serves the E2B protocol over a Manager. Build it with New.
type Server struct {
	m          core.Manager
	tokens     *tokens.Set
	secret     []byte
	ports      http.Handler
	front      *core.PortsFront
	log        *slog.Logger
	keepalive  time.Duration
	cmdTimeout time.Duration

	control http.Handler
	envd    http.Handler
	interp  http.Handler

	guard    *httpguard.Guard
	maxConns int

	procs     procTable
	abandoned abandonedTable

	// builds remembers the template builds requested (templates.go).
	builds *ttlcache.Cache[string, buildEntry]
}

// New returns the door over m.
func New(m core.Manager, cfg Config) (*Server, error) {
	if len(cfg.Secret) < 16 {
		return nil, errors.New("e2bapi: the access-token secret is missing or shorter than 16 bytes")
	}
	if (cfg.Ports == nil) != (cfg.Front == nil) {
		return nil, errors.New("e2bapi: Config.Ports and Config.Front go together")
	}
	s := &Server{m: m, tokens: cfg.Tokens, secret: cfg.Secret, ports: cfg.Ports, front: cfg.Front, log: cfg.Logger,
		keepalive: cfg.Keepalive, cmdTimeout: cfg.CommandTimeout}
	if s.log == nil {
		s.log = discardLogger
	}
	if s.keepalive <= 0 {
		s.keepalive = 5 * time.Second
	}
	s.guard = httpguard.New(httpguard.Limits{
		BodyTimeout:    cmp.Or(cfg.BodyTimeout, bodyTimeout),
		MinBodyRate:    minBodyRate,
		MaxReads:       maxBodyReads,
		MaxReadsPerKey: maxBodyReadsPerTenant,
		QueueWait:      bodyQueueWait,
		FreeBelow:      freeBodyBytes,
	}, s.log)
	s.maxConns = httpguard.ConnLimit(maxConns)
	s.procs.init()
	s.builds = newBuildCache()
	s.control = s.controlMux()
	s.envd = s.envdMux()
	s.interp = s.interpreterMux()
	return s, nil
}

// HTTPServer returns an http.Server for the door with bounded headers and
// slow-client timeouts; bodies have theirs (httpguard). No read or write
// timeout: /execute and the RPC streams last as long as their commands.
// Serve it on LimitListener's listener.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// LimitListener bounds the connections the door holds open: at most 4096,
// and at most half of sandboxd's descriptor limit, so that a flood of
// connections leaves descriptors to the gRPC API and the sandboxes' files.
func (s *Server) LimitListener(l net.Listener) net.Listener {
	return httpguard.LimitListener(l, s.maxConns)
}

type guardKey struct{}

// ServeHTTP routes on E2b-Sandbox-Port, as E2B's own edge does, and a
// request without it whose Host names a sandbox's port (getHost's URL) to
// the ports front, which applies its own bounds and authorisation (the
// traffic token). Nothing reads a body before its request is
// authenticated, and then admitted (admit): a refusal is sent at once,
// without waiting for the body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.ports != nil && r.Header.Get("E2b-Sandbox-Port") == "" {
		if _, _, ok := s.front.ParseHost(r.Host); ok {
			s.ports.ServeHTTP(w, r)
			return
		}
	}
	w, body := s.guard.Start(w, r)
	defer body.End()
	r = r.WithContext(context.WithValue(r.Context(), guardKey{}, body))
	switch port := r.Header.Get("E2b-Sandbox-Port"); port {
	case "":
		s.control.ServeHTTP(w, r)
	case EnvdPort, InterpreterPort:
		ctx, err := s.sandboxContext(r)
		if err != nil {
			if r.URL.Path == "/health" && port == EnvdPort && core.ClassOf(err) == core.ErrNotFound {
				// The SDK probes /health after a dropped stream: 502
				// tells it the sandbox is gone.
				http.Error(w, "the sandbox is not running", http.StatusBadGateway)
				return
			}
			s.writeError(w, r, "sandbox auth", err)
			return
		}
		r = r.WithContext(ctx)
		if limit, ok := bodyLimitOf(port, r); ok && !s.limitBody(w, r, limit) {
			return
		}
		if !s.admit(w, r, core.CallerOf(ctx).Tenant, admissionOf(port, r)) {
			return
		}
		if port == EnvdPort {
			s.envd.ServeHTTP(w, r)
		} else {
			s.interp.ServeHTTP(w, r)
		}
	default:
		writeJSON(w, http.StatusBadGateway, map[string]any{"code": http.StatusBadGateway,
			"message": fmt.Sprintf("port %q is not served: sandboxd's sandboxes have no network; only envd (%s) and the code interpreter (%s) are", sanitizeHeader(port), EnvdPort, InterpreterPort)})
	}
}

// admission is how a request's body is admitted.
type admission int

const (
	// decodedAsRead: a place while the body is read (and decoded as it
	// is: JSON bodies, a streaming RPC's one message, read to its end
	// before the stream starts).
	decodedAsRead admission = iota
	// decodedWhole: a place until the request ends: a unary RPC's message,
	// read whole and then decoded by a short handler.
	decodedWhole
	// streamed: no place: an upload, streamed into the sandbox.
	streamed
)

// streamingRPCs are envd's procedures whose responses stream (as long as
// their command or watch): their request is one message.
var streamingRPCs = map[string]bool{
	processconnect.ProcessStartProcedure:          true,
	processconnect.ProcessConnectProcedure:        true,
	filesystemconnect.FilesystemWatchDirProcedure: true,
}

// admissionOf is how a sandbox-level request's body is admitted.
func admissionOf(port string, r *http.Request) admission {
	switch {
	case port != EnvdPort:
		return decodedAsRead
	case r.URL.Path == "/files":
		return streamed
	case isRPC(r):
		if streamingRPCs[r.URL.Path] {
			return decodedAsRead
		}
		return decodedWhole
	}
	return decodedAsRead
}

// bodyLimitOf is the bound of a sandbox-level request's body, if the door
// has one: an upload's is the domain's (Policy.MaxUploadBytes, applied as
// it is read), StreamInput's a message's (connect's, for each of its
// messages); another RPC's body is one message, enveloped when streamed.
func bodyLimitOf(port string, r *http.Request) (int64, bool) {
	switch {
	case port != EnvdPort && r.URL.Path == "/execute":
		return maxExecuteBody, true
	case port != EnvdPort:
		return maxControlBody, true
	case r.URL.Path == "/files", r.URL.Path == processconnect.ProcessStreamInputProcedure:
		return 0, false
	case isRPC(r):
		return maxRPCBody + rpcEnvelopeBytes, true
	}
	return maxControlBody, true
}

// rpcEnvelopeBytes is the prefix of a streamed RPC message (its flags and
// length).
const rpcEnvelopeBytes = 5

// isRPC reports whether r is one of envd's Connect RPCs.
func isRPC(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/process.") || strings.HasPrefix(r.URL.Path, "/filesystem.")
}

// limitBody caps an authenticated request's body at limit bytes, before
// anything reads it (httpguard.LimitBody): a body declared longer is
// refused (413, naming the bound) without 100 Continue and without
// waiting for a place; an RPC's refusal is a Connect error
// (resource_exhausted), which Connect clients read as such. False once it
// has answered.
func (s *Server) limitBody(w http.ResponseWriter, r *http.Request, limit int64) bool {
	err := httpguard.LimitBody(w, r, limit)
	if err == nil {
		return true
	}
	msg := httpguard.TooLargeMessage(limit)
	if isRPC(r) && r.Header.Get("E2b-Sandbox-Port") == EnvdPort {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"code": connect.CodeResourceExhausted.String(), "message": msg})
		return false
	}
	s.writeError(w, r, "request", tooLarge(limit))
	return false
}

// admit lets an authenticated request's body be read (httpguard): under
// its deadline, and, unless it is small or streamed, once it has a place
// among the bodies being read at once, globally and of its tenant. False
// once it has answered (503: no place within 10 s).
func (s *Server) admit(w http.ResponseWriter, r *http.Request, tenant string, how admission) bool {
	body, _ := r.Context().Value(guardKey{}).(*httpguard.Request)
	switch how {
	case streamed:
		return body.AdmitStream(r)
	case decodedWhole:
		return body.AdmitUntilEnd(r, tenant)
	}
	return body.Admit(r, tenant)
}

// sanitizeHeader bounds and cleans a header value before it is echoed.
func sanitizeHeader(v string) string {
	if len(v) > 64 {
		v = v[:64]
	}
	return strings.ToValidUTF8(v, "?")
}

type sandboxKey struct{}

// sandboxFrom returns the sandbox ID sandboxContext put in ctx.
func sandboxFrom(ctx context.Context) string {
	id, _ := ctx.Value(sandboxKey{}).(string)
	return id
}

// admin is the caller the door uses to learn a sandbox's tenant once its
// access token was verified.
var admin = core.Caller{Tenant: core.DefaultTenant, Admin: true, Name: AccessTokenName}

// AccessTokenName is the name a sandbox-level request's calls carry
// (core.Caller.Name): they are authorised by the sandbox's access token,
// not by a token of the token file, so the audit trail names that.
const AccessTokenName = "e2b-access-token"

// sandboxContext authenticates a sandbox-level request: the access token
// (X-Access-Token) must be the sandbox's. Without it,
// E2B-Traffic-Access-Token may carry it instead; on the code
// interpreter's /contexts and /health, which the SDK calls with the
// traffic token alone (trafficOpens), the sandbox's traffic token (the
// ports front's) is accepted too, as E2B's own edge accepts it for the
// interpreter's port. The context returned acts as the sandbox's tenant
// and carries its ID.
func (s *Server) sandboxContext(r *http.Request) (context.Context, error) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if id == "" {
		return nil, badRequest("the E2b-Sandbox-Id header is missing")
	}
	if err := core.ValidateSandboxID(id); err != nil {
		return nil, err
	}
	tok := r.Header.Get("X-Access-Token")
	ok := tok != "" && hmac.Equal([]byte(tok), []byte(s.accessToken(id)))
	if tt := r.Header.Get(core.E2BTrafficTokenHeader); tok == "" && tt != "" {
		ok = hmac.Equal([]byte(tt), []byte(s.accessToken(id))) || (trafficOpens(r) && s.front != nil && s.front.CheckToken(id, tt))
	}
	if !ok {
		return nil, &apiError{status: http.StatusUnauthorized, msg: "the sandbox's access token (X-Access-Token) is missing or wrong"}
	}
	sb, err := s.m.Get(core.WithCaller(r.Context(), admin), id)
	if err != nil {
		return nil, err
	}
	if sb.State != core.StateRunning {
		return nil, &apiError{status: http.StatusBadGateway, msg: "the sandbox is not running: " + sb.StateReason}
	}
	ctx := core.WithCaller(r.Context(), core.Caller{Tenant: sb.Tenant, Name: AccessTokenName})
	return context.WithValue(ctx, sandboxKey{}, id), nil
}

// trafficOpens reports whether r is one of the code interpreter's calls
// the SDK authenticates with the traffic token alone: its contexts (list,
// create, restart, remove) and /health, never /execute or envd.
func trafficOpens(r *http.Request) bool {
	p := r.URL.Path
	return r.Header.Get("E2b-Sandbox-Port") == InterpreterPort && (p == "/contexts" || strings.HasPrefix(p, "/contexts/") || p == "/health")
}

// accessToken is a sandbox's envd access token: HMAC-SHA256 of its ID.
func (s *Server) accessToken(sandboxID string) string {
	mac := hmac.New(sha256.New, s.secret)
	mac.Write([]byte("e2b-envd-access:" + sandboxID))
	return hex.EncodeToString(mac.Sum(nil))
}

// callerFor authenticates a control-plane request by its X-API-KEY.
func (s *Server) callerFor(r *http.Request) (core.Caller, error) {
	key := r.Header.Get("X-API-KEY")
	if key == "" {
		return core.Caller{}, &apiError{status: http.StatusUnauthorized, msg: "the X-API-KEY header is missing (set E2B_API_KEY)"}
	}
	if s.tokens == nil {
		return core.DefaultCaller, nil
	}
	c, ok := s.tokens.Lookup(key)
	if !ok {
		return core.Caller{}, &apiError{status: http.StatusUnauthorized, msg: "the API key is not valid on this server"}
	}
	return c, nil
}

// LoadSecret reads the access-token secret from path, creating it (32
// random bytes, mode 0600) when missing, so tokens handed out survive
// sandboxd restarts (internal/secretfile).
func LoadSecret(path string) ([]byte, error) { return secretfile.Load(path) }

// ensure the generated services are linked (their handlers live in
// envd.go).
var (
	_ processconnect.ProcessHandler       = (*processService)(nil)
	_ filesystemconnect.FilesystemHandler = (*filesystemService)(nil)
)

// procTable remembers how this door started each process, for
// Process.List (sandboxd's command list has no argv) and tag selectors.
// What it keeps is bounded per sandbox, in entries and in bytes (a
// process's arguments may take most of an 8 MiB message): past a bound
// the oldest entries are forgotten (Process.List no longer shows them;
// their pids still reach them), and one larger than the whole byte bound
// is not kept at all.
type procTable struct {
	mu    sync.Mutex
	procs map[string]*procSet // sandbox ID → its processes
}

type procEntry struct {
	cmd  string
	args []string
	envs map[string]string
	cwd  string
	tag  string
}

// size is what e holds in memory, near enough.
func (e procEntry) size() int {
	n := len(e.cmd) + len(e.cwd) + len(e.tag) + 64
	for _, a := range e.args {
		n += len(a) + 16
	}
	for k, v := range e.envs {
		n += len(k) + len(v) + 32
	}
	return n
}

// procSet is one sandbox's entries, oldest first in order.
type procSet struct {
	byPID map[uint32]procEntry
	order []uint32
	bytes int
}

func (t *procTable) init() { t.procs = make(map[string]*procSet) }

// Bounds of what the table keeps per sandbox.
const (
	maxProcEntries = 1000
	maxProcBytes   = 4 << 20
)

func (t *procTable) put(sandboxID string, pid uint32, e procEntry) {
	size := e.size()
	if size > maxProcBytes {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.procs[sandboxID]
	if ps == nil {
		ps = &procSet{byPID: make(map[uint32]procEntry)}
		t.procs[sandboxID] = ps
	}
	for len(ps.order) > 0 && (len(ps.byPID) >= maxProcEntries || ps.bytes+size > maxProcBytes) {
		ps.remove(ps.order[0])
	}
	ps.byPID[pid] = e
	ps.order = append(ps.order, pid)
	ps.bytes += size
}

// remove forgets pid, if kept.
func (ps *procSet) remove(pid uint32) {
	e, ok := ps.byPID[pid]
	if !ok {
		return
	}
	delete(ps.byPID, pid)
	ps.bytes -= e.size()
	for i, p := range ps.order {
		if p == pid {
			ps.order = append(ps.order[:i], ps.order[i+1:]...)
			break
		}
	}
}

func (t *procTable) get(sandboxID string, pid uint32) (procEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.procs[sandboxID]
	if ps == nil {
		return procEntry{}, false
	}
	e, ok := ps.byPID[pid]
	return e, ok
}

func (t *procTable) byTag(sandboxID, tag string) (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.procs[sandboxID]
	if ps == nil {
		return 0, false
	}
	for pid, e := range ps.byPID {
		if e.tag == tag {
			return pid, true
		}
	}
	return 0, false
}

func (t *procTable) drop(sandboxID string, pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ps := t.procs[sandboxID]; ps != nil {
		ps.remove(pid)
		if len(ps.byPID) == 0 {
			delete(t.procs, sandboxID)
		}
	}
}

func (t *procTable) forget(sandboxID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.procs, sandboxID)
}
