// Package web is the agent's browser interface: a ChatGPT-like chat on the
// left and a trace panel on the right (every tool call with its code,
// streamed output, images, interactive plotly charts, and a token counter),
// updated live through server-sent events. Pages are rendered on the server
// (html/template, Markdown with goldmark and chroma); a small script applies
// the live updates. Each browser gets its own user ID through a cookie, and
// so its own sandbox.
package web

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/base32"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/internal/httpguard"
	"github.com/sandboxd/sandboxd/internal/plotlyjs"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure the web interface.
type Options struct {
	// Agent runs the conversations.
	Agent *loop.Agent
	// PlotlyJS is the path of a plotly.min.js to serve to the chart frames
	// instead of the one embedded in the binary (internal/plotlyjs). Empty
	// means the embedded one.
	PlotlyJS string
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// BodyTimeout is the time a form's body has to arrive; 0: 30 s. Tests
	// shorten it.
	BodyTimeout time.Duration
	// Metrics, when set, shows the conversation's sandbox's CPU and memory
	// (sandbox.go).
	Metrics SandboxMetrics
}

// Bounds of what a client can send and hold (internal/httpguard).
const (
	// maxFormBytes caps a form's body (a message of up to about that
	// many bytes, URL-encoded), and maxFormFields its fields.
	maxFormBytes  = 1 << 20
	maxFormFields = 16
	// maxBodyReads bodies are read at once (anyone who can reach the
	// page may post: a browser gets a user from its first request).
	maxBodyReads = 16
	// maxConns is the most connections held open (fewer when the
	// descriptor limit is low: half of it).
	maxConns = 1024
)

// Server serves the web interface.
type Server struct {
	agent    *loop.Agent
	store    *session.Store
	log      *slog.Logger
	tmpl     *template.Template
	plotly   []byte
	chroma   []byte
	mux      *http.ServeMux
	shutdown chan struct{}
	guard    *httpguard.Guard
	metrics  SandboxMetrics
}

// New returns the web interface's server.
func New(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{"thousands": thousands}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("parsing templates: %w", err)
	}
	s := &Server{agent: o.Agent, store: o.Agent.Store(), log: o.Logger, tmpl: tmpl, chroma: chromaCSS(), shutdown: make(chan struct{}),
		guard: httpguard.New(httpguard.Limits{BodyTimeout: o.BodyTimeout, MaxReads: maxBodyReads}, o.Logger), metrics: o.Metrics}
	s.plotly = plotlyjs.JS
	if o.PlotlyJS != "" {
		if s.plotly, err = os.ReadFile(o.PlotlyJS); err != nil {
			return nil, fmt.Errorf("plotly.js: %w", err)
		}
		s.log.Info("serving plotly.js from a file", "path", o.PlotlyJS)
	}

	static, _ := fs.Sub(staticFS, "static")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.home)
	mux.HandleFunc("POST /c", s.create)
	mux.HandleFunc("GET /c/{id}", s.page)
	mux.HandleFunc("POST /c/{id}/messages", s.send)
	mux.HandleFunc("POST /c/{id}/stop", s.stop)
	mux.HandleFunc("GET /c/{id}/events", s.events)
	mux.HandleFunc("GET /c/{id}/runs/{call}/images/{n}", s.image)
	mux.HandleFunc("GET /c/{id}/runs/{call}/charts/{n}", s.chart)
	mux.HandleFunc("GET /static/chroma.css", s.serveBytes("text/css; charset=utf-8", s.chroma))
	mux.HandleFunc("GET /static/plotly.min.js", s.servePlotly)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux = mux
	return s, nil
}

// HTTPServer returns an http.Server for the interface with bounded
// headers and idle connections; bodies have their own deadline. No read or
// write timeout: event streams last as long as the page is open. Serve it
// on LimitListener's listener.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// LimitListener bounds the connections the interface holds open: at most
// 1024, and at most half of the process's descriptor limit.
func (s *Server) LimitListener(l net.Listener) net.Listener {
	return httpguard.LimitListener(l, httpguard.ConnLimit(maxConns))
}

// ServeHTTP implements http.Handler. Nothing reads a body before its
// request is accepted: a refusal is sent at once, without waiting for it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w, body := s.guard.Start(w, r)
	defer body.End()
	r = r.WithContext(context.WithValue(r.Context(), guardKey{}, body))
	if r.Method == http.MethodPost && !sameOrigin(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

// Shutdown ends the open event streams, so that http.Server.Shutdown does
// not wait for them.
func (s *Server) Shutdown() {
	select {
	case <-s.shutdown:
	default:
		close(s.shutdown)
	}
}

// sameOrigin refuses form posts from other sites (the cookie is SameSite=Lax
// too; this also covers browsers that do not implement it).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return r.Header.Get("Sec-Fetch-Site") != "cross-site"
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// userCookie holds the browser's user ID.
const userCookie = "agent_user"

// user returns the browser's user ID, issuing one (in a cookie) to a new
// browser. IDs are random and unguessable: the cookie is the credential.
func (s *Server) user(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(userCookie); err == nil && validUser(c.Value) {
		return c.Value
	}
	b := make([]byte, 15)
	rand.Read(b)
	id := "web-" + strings.ToLower(base32.StdEncoding.EncodeToString(b))
	http.SetCookie(w, &http.Cookie{Name: userCookie, Value: id, Path: "/", MaxAge: 365 * 24 * 3600,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	return id
}

func validUser(v string) bool {
	if !strings.HasPrefix(v, "web-") || len(v) != 28 {
		return false
	}
	for _, c := range v[4:] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// conversation returns the request's conversation if it belongs to the
// browser's user; otherwise it answers 404 and returns false.
func (s *Server) conversation(w http.ResponseWriter, r *http.Request) (session.Conversation, string, bool) {
	user := s.user(w, r)
	c, err := s.store.Conversation(r.Context(), r.PathValue("id"))
	if err == nil && c.UserID == user {
		return c, user, true
	}
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		s.fail(w, r, err)
		return c, user, false
	}
	http.Error(w, "no such conversation", http.StatusNotFound)
	return c, user, false
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("request failed", "path", r.URL.Path, "err", err)
	http.Error(w, "internal error: "+err.Error(), http.StatusInternalServerError)
}

// fromScript says the request came from the page's script (which wants a
// status, not a redirect).
func fromScript(r *http.Request) bool { return r.Header.Get("X-Requested-With") == "fetch" }

func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	user := s.user(w, r)
	s.render(w, r, user, nil)
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	c, user, ok := s.conversation(w, r)
	if !ok {
		return
	}
	s.render(w, r, user, &c)
}

type guardKey struct{}

// message reads the form's "message" (URL-encoded, as the page posts it;
// else the URL's), under the body's deadline and a place among the bodies
// being read, at most maxFormBytes and maxFormFields: the fields are
// scanned, never gathered into a map. It returns false once it has
// answered.
func (s *Server) message(w http.ResponseWriter, r *http.Request) (string, bool) {
	body, _ := r.Context().Value(guardKey{}).(*httpguard.Request)
	tooLong := func() (string, bool) {
		http.Error(w, fmt.Sprintf("the message is too long (the form is at most %d bytes)", maxFormBytes), http.StatusRequestEntityTooLarge)
		return "", false
	}
	// A form declared longer is refused before 100 Continue and before
	// it waits for a place (httpguard.LimitBody).
	if httpguard.LimitBody(w, r, maxFormBytes) != nil {
		return tooLong()
	}
	if !body.Admit(r, "") {
		return "", false
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); r.ContentLength != 0 && mt != "application/x-www-form-urlencoded" {
		http.Error(w, "the form must be application/x-www-form-urlencoded", http.StatusUnsupportedMediaType)
		return "", false
	}
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return tooLong()
	case errors.Is(err, os.ErrDeadlineExceeded):
		http.Error(w, "the form did not arrive in time", http.StatusRequestTimeout)
		return "", false
	case err != nil:
		http.Error(w, "reading the form: "+err.Error(), http.StatusBadRequest)
		return "", false
	}
	form := string(b)
	for n := 0; form != ""; n++ {
		if n >= maxFormFields {
			http.Error(w, fmt.Sprintf("the form has more than %d fields", maxFormFields), http.StatusBadRequest)
			return "", false
		}
		var pair string
		pair, form, _ = strings.Cut(form, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(k); err != nil || k != "message" {
			continue
		}
		text, err := url.QueryUnescape(v)
		if err != nil {
			http.Error(w, "the form is malformed: "+err.Error(), http.StatusBadRequest)
			return "", false
		}
		return strings.TrimSpace(text), true
	}
	return strings.TrimSpace(r.URL.Query().Get("message")), true
}

// create starts a conversation with its first message.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	user := s.user(w, r)
	text, ok := s.message(w, r)
	if !ok {
		return
	}
	if text == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c, err := s.store.CreateConversation(r.Context(), user)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.agent.Send(r.Context(), c.ID, text); err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/c/"+c.ID, http.StatusSeeOther)
}

func (s *Server) send(w http.ResponseWriter, r *http.Request) {
	c, _, ok := s.conversation(w, r)
	if !ok {
		return
	}
	text, ok := s.message(w, r)
	if !ok {
		return
	}
	if text == "" {
		http.Error(w, "empty message", http.StatusBadRequest)
		return
	}
	if err := s.agent.Send(r.Context(), c.ID, text); err != nil {
		if errors.Is(err, session.ErrBusy) {
			http.Error(w, "still working on the previous message; wait or press Stop", http.StatusConflict)
			return
		}
		s.fail(w, r, err)
		return
	}
	if fromScript(r) {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	http.Redirect(w, r, "/c/"+c.ID, http.StatusSeeOther)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	c, _, ok := s.conversation(w, r)
	if !ok {
		return
	}
	s.agent.Stop(c.ID)
	if fromScript(r) {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	http.Redirect(w, r, "/c/"+c.ID, http.StatusSeeOther)
}

// artifact returns the artifact the request names, or answers an error.
func (s *Server) artifact(w http.ResponseWriter, r *http.Request, kind string) ([]byte, string, bool) {
	c, _, ok := s.conversation(w, r)
	if !ok {
		return nil, "", false
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 {
		http.Error(w, "bad artifact number", http.StatusBadRequest)
		return nil, "", false
	}
	a, err := s.store.Artifact(r.Context(), c.ID, r.PathValue("call"), kind, n)
	if errors.Is(err, session.ErrNotFound) {
		http.Error(w, "no such artifact", http.StatusNotFound)
		return nil, "", false
	}
	if err != nil {
		s.fail(w, r, err)
		return nil, "", false
	}
	return a.Data, a.MIME, true
}

func (s *Server) image(w http.ResponseWriter, r *http.Request) {
	data, mime, ok := s.artifact(w, r, session.ArtifactImage)
	if !ok {
		return
	}
	if mime != "image/png" && mime != "image/jpeg" {
		mime = "application/octet-stream"
	}
	w.Header().Set("Content-Type", mime)
	w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
	w.Write(data)
}

func (s *Server) serveBytes(contentType string, data []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(data)
	}
}

func (s *Server) servePlotly(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=86400")
	w.Write(s.plotly)
}
