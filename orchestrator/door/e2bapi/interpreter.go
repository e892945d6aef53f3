package e2bapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"

	"github.com/sandboxd/sandboxd/ioproto"
)

func (s *Server) interpreterMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, "OK") })
	mux.HandleFunc("POST /execute", s.execute)
	mux.HandleFunc("POST /contexts", s.createContext)
	mux.HandleFunc("GET /contexts", s.listContexts)
	mux.HandleFunc("DELETE /contexts/{id}", s.deleteContext)
	mux.HandleFunc("POST /contexts/{id}/restart", s.restartContext)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": http.StatusNotFound,
			"message": fmt.Sprintf("code interpreter: %s %s is not served by sandboxd", r.Method, sanitizeHeader(r.URL.Path))})
	})
	return mux
}

// languageOf maps the code interpreter's language names to sandboxd's
// (which resolves its own aliases); "" is the default, Python.
func languageOf(l string) string {
	switch strings.ToLower(l) {
	case "", "python", "python3":
		return ""
	case "sh":
		return ioproto.LanguageBash
	}
	return strings.ToLower(l)
}

type executeRequest struct {
	Code      string
	ContextID string
	Language  string
	EnvVars   map[string]string
}

// decode decodes an /execute body as it is read: env_vars is refused at
// its 257th variable (or past 128 KiB), whatever else the body holds.
func (req *executeRequest) decode(r *http.Request) error {
	return decodeObject(r.Body, map[string]field{
		"code":       stringField(&req.Code, maxExecuteBody),
		"context_id": stringField(&req.ContextID, maxNameLen),
		"language":   stringField(&req.Language, maxNameLen),
		"env_vars":   mapField(&req.EnvVars, "variables", ioproto.MaxEnvVars, ioproto.MaxEnvBytes),
	})
}

// execute answers POST /execute: the command's events as NDJSON lines in
// the code interpreter's format, a keepalive line after each 5 s of
// silence, end_of_execution last. A client that goes away interrupts the
// command, as E2B does (unlike sandboxd's gRPC API, where it can resume).
func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	var req executeRequest
	if err := req.decode(r); err != nil {
		s.writeError(w, r, "execute", err)
		return
	}
	if req.ContextID != "" && req.Language != "" {
		s.writeError(w, r, "execute", badRequest("give context_id or language, not both"))
		return
	}
	ctx := r.Context()
	id := sandboxFrom(ctx)
	out := &ndjson{w: w, rc: http.NewResponseController(w)}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The response starts once the command is in the sandbox's log: an
	// error before that is an HTTP error, after it an error line.
	var cmdID string
	submitted := func(commandID string) {
		cmdID = commandID
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		go func() {
			t := time.NewTicker(s.keepalive)
			defer t.Stop()
			for {
				select {
				case <-kctx.Done():
					return
				case <-t.C:
					if out.idleFor() >= s.keepalive {
						_ = out.line(map[string]any{"type": "keepalive"})
					}
				}
			}
		}()
	}

	// What the client was told: the last event, the context and language
	// the command runs in (its started event), and whether it saw the end.
	var (
		lastSeq   int64
		contextID = cmpOr(req.ContextID, ioproto.DefaultContext)
		lang      = languageOf(req.Language)
		ended     bool
		writeErr  error
	)
	line := func(v any) error {
		if err := out.line(v); err != nil {
			writeErr = err
			return err
		}
		return nil
	}
	sawError := false
	// Submit and follow in one call: one round trip to a Kubernetes
	// sandbox's io sidecar.
	err := s.m.Execute(ctx, core.ExecRequest{SandboxID: id, Language: languageOf(req.Language),
		Code: req.Code, Env: req.EnvVars, ContextID: req.ContextID, Timeout: s.cmdTimeout}, submitted, func(ev core.Event) error {
		lastSeq = ev.Seq
		switch ev.Type {
		case ioproto.EventStarted:
			contextID, lang = cmpOr(ev.ContextID, contextID), cmpOr(ev.Language, lang)
			for _, n := range s.lostNotices(ctx, id, ev) {
				if err := line(noticeLine(n)); err != nil {
					return err
				}
			}
		case ioproto.EventStdout, ioproto.EventStderr:
			return line(map[string]any{"type": ev.Type, "text": ev.Text, "timestamp": timestamp(ev.Time)})
		case ioproto.EventDisplay, ioproto.EventResult:
			return line(resultOf(ev.Data, ev.Type == ioproto.EventResult))
		case ioproto.EventError:
			sawError = true
			return line(map[string]any{"type": "error", "name": ev.EName, "value": ev.EValue, "traceback": strings.Join(ev.Traceback, "\n")})
		case ioproto.EventDone:
			if !sawError && ev.Status != ioproto.StatusOK {
				if err := line(errorOfStatus(ev)); err != nil {
					return err
				}
			} else if ev.StateLost {
				// The command ran, on fresh globals (the sandbox restarted
				// since the previous one): say so, as for gRPC clients.
				if err := line(noticeLine(cmpOr(ev.Reason, "the globals defined before this execution are gone"))); err != nil {
					return err
				}
			}
			if ev.ExecutionCount != nil {
				if err := line(map[string]any{"type": "number_of_executions", "execution_count": *ev.ExecutionCount}); err != nil {
					return err
				}
			}
			if err := line(map[string]any{"type": "end_of_execution"}); err != nil {
				return err
			}
			ended = true
		}
		return nil
	})
	if cmdID == "" {
		s.writeError(w, r, "execute", err)
		return
	}
	if !ended && (ctx.Err() != nil || writeErr != nil) {
		// The client went away (or its timeout aborted the request):
		// interrupt the command, as E2B's code interpreter does, and
		// follow it to its end, for the next execution to tell.
		cancel()
		s.abandon(ctx, id, cmdID, contextID, lang, lastSeq)
		return
	}
	if err != nil {
		_, msg := s.classify(ctx, "execute", err)
		_ = out.line(map[string]any{"type": "error", "name": "SandboxError", "value": msg, "traceback": ""})
	}
}

// errorOfStatus is the error line of a command that ended without an
// exception event: timed out, interrupted, killed, or a bash command that
// failed.
func errorOfStatus(ev core.Event) map[string]any {
	name := map[string]string{
		ioproto.StatusTimeout:     "TimeoutError",
		ioproto.StatusInterrupted: "KeyboardInterrupt",
		ioproto.StatusKilled:      "Killed",
	}[ev.Status]
	value := ev.Reason
	if name == "" {
		name = "Error"
		if ev.ExitCode != nil {
			value = fmt.Sprintf("exit status %d", *ev.ExitCode)
		}
	}
	if value == "" {
		value = ev.Status
	}
	return map[string]any{"type": "error", "name": name, "value": value, "traceback": ""}
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// mimeKeys maps MIME types to the code interpreter's result fields.
var mimeKeys = map[string]string{
	"text/plain":                          "text",
	"text/html":                           "html",
	"text/markdown":                       "markdown",
	"image/svg+xml":                       "svg",
	"image/png":                           "png",
	"image/jpeg":                          "jpeg",
	"application/pdf":                     "pdf",
	"text/latex":                          "latex",
	"application/json":                    "json",
	"application/javascript":              "javascript",
	"application/vnd.dataresource+json":   "data",
	"application/vnd.sandboxd.chart+json": "chart",
}

// jsonValued are the fields whose value is JSON, sent as such.
var jsonValued = map[string]bool{"json": true, "data": true, "chart": true}

// resultOf converts a MIME bundle to a result line.
func resultOf(data map[string]string, main bool) map[string]any {
	out := map[string]any{"type": "result", "is_main_result": main}
	for mt, v := range data {
		key, ok := mimeKeys[mt]
		if !ok {
			out[mt] = v
			continue
		}
		switch {
		case jsonValued[key]:
			var j any
			if json.Unmarshal([]byte(v), &j) == nil {
				out[key] = j
			} else {
				out[key] = v
			}
		case key == "text":
			out[key] = unquoteRepr(v)
		default:
			out[key] = v
		}
	}
	return out
}

// unquoteRepr strips the quotes of a Python str repr ('abc'), as E2B's
// code interpreter shows a string result.
func unquoteRepr(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' && !strings.Contains(v[1:len(v)-1], "'") {
		return v[1 : len(v)-1]
	}
	return v
}

// ndjson writes lines and flushes each one.
type ndjson struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	last time.Time
}

func (n *ndjson) line(v any) error {
	b, err := json.Marshal(v) // invalid UTF-8 becomes U+FFFD
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last = time.Now()
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return n.rc.Flush()
}

func (n *ndjson) idleFor() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Since(n.last)
}

type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func contextOf(c core.ContextInfo) contextJSON {
	return contextJSON{ID: c.ID, Language: c.Language, Cwd: fromWorkspace(c.Cwd)}
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request) {
	var req struct{ Language, Cwd string }
	err := decodeObject(r.Body, map[string]field{
		"language": stringField(&req.Language, maxNameLen),
		"cwd":      stringField(&req.Cwd, maxPathLen),
	})
	if err != nil {
		s.writeError(w, r, "create context", err)
		return
	}
	lang := languageOf(req.Language)
	if lang == "" {
		lang = ioproto.LanguagePython
	}
	c, err := s.m.CreateContext(r.Context(), sandboxFrom(r.Context()), lang, toWorkspace(req.Cwd))
	if err != nil {
		s.writeError(w, r, "create context", err)
		return
	}
	writeJSON(w, http.StatusOK, contextOf(c))
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.ListContexts(r.Context(), sandboxFrom(r.Context()))
	if err != nil {
		s.writeError(w, r, "list contexts", err)
		return
	}
	out := make([]contextJSON, 0, len(list))
	for _, c := range list {
		out = append(out, contextOf(c))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request) {
	if err := s.m.DeleteContext(r.Context(), sandboxFrom(r.Context()), r.PathValue("id")); err != nil {
		s.writeError(w, r, "delete context", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request) {
	if err := s.m.RestartContext(r.Context(), sandboxFrom(r.Context()), r.PathValue("id")); err != nil {
		s.writeError(w, r, "restart context", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
