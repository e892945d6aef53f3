package web_test

// Handler tests with a real agent loop and store, a scripted model and a
// tool that needs no sandbox (sandbox-backed behaviour is covered by the
// browser test).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/llm"
	"github.com/sandboxd/sandboxd/agent/loop"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/tools"
	"github.com/sandboxd/sandboxd/agent/web"
	"github.com/sandboxd/sandboxd/client"
)

// noSandboxes fails every sandbox operation: these tests use no sandbox.
type noSandboxes struct{}

func (noSandboxes) Acquire(context.Context, string, ...client.AcquireOption) (client.Acquired, error) {
	return client.Acquired{}, errors.New("no sandboxes in this test")
}
func (noSandboxes) Check(context.Context, string) error {
	return errors.New("no sandboxes in this test")
}
func (noSandboxes) Interrupt(context.Context, string, string) error {
	return errors.New("no sandboxes in this test")
}

const plotlyHTML = `<div id="chart">plotly</div><script src="https://cdn.plot.ly/plotly-2.6.3.min.js"></script><script>draw()</script>`

// chartTool returns a plotly chart without any sandbox.
var chartTool = tools.Tool{
	Name: "chart", Description: "makes a chart", Parameters: map[string]any{"type": "object"},
	Run: func(context.Context, tools.Invocation) (tools.Result, error) {
		return tools.Result{Text: "chart shown", Status: "ok", Charts: []tools.Artifact{{MIME: "text/html", Data: []byte(plotlyHTML)}}}, nil
	},
}

type handlerStack struct {
	srv   *httptest.Server
	agent *loop.Agent
}

func startHandlers(t *testing.T, h sm.Handler) *handlerStack {
	t.Helper()
	plotly := filepath.Join(t.TempDir(), "plotly.min.js")
	if err := os.WriteFile(plotly, []byte("/* plotly */"), 0o644); err != nil {
		t.Fatal(err)
	}
	return startHandlersPlotly(t, h, plotly)
}

// startHandlersPlotly serves plotlyJS ("" is the embedded one).
func startHandlersPlotly(t *testing.T, h sm.Handler, plotly string) *handlerStack {
	t.Helper()
	return startHandlersOpts(t, h, web.Options{PlotlyJS: plotly})
}

// startHandlersOpts serves the interface with o (its Agent set here) as
// `agent serve` does: its own http.Server and listener.
func startHandlersOpts(t *testing.T, h sm.Handler, o web.Options) *handlerStack {
	t.Helper()
	model := sm.Start(t, h)
	store, err := session.Open(filepath.Join(t.TempDir(), "agent.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	reg, err := tools.NewRegistry(chartTool)
	if err != nil {
		t.Fatal(err)
	}
	m, err := llm.New(llm.Config{BaseURL: model.URL, Model: "scripted", MaxRetries: 0})
	if err != nil {
		t.Fatal(err)
	}
	a, err := loop.New(loop.Config{Store: store, Model: m, Tools: reg, Sandboxes: noSandboxes{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	o.Agent = a
	ws, err := web.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(ws)
	srv.Config = ws.HTTPServer()
	srv.Listener = ws.LimitListener(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(ws.Shutdown)
	return &handlerStack{srv: srv, agent: a}
}

// newBrowser is an HTTP client with its own cookies that does not follow
// redirects.
func newBrowser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}

// TestConversationPagesArePrivate: a browser sees its own conversation,
// rendered (Markdown, no raw HTML from the model); another browser does not.
func TestConversationPagesArePrivate(t *testing.T) {
	st := startHandlers(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{{ID: "c1", Name: "chart", Args: map[string]any{}}}}
		}),
		sm.Say("Hello **there**\n\n```python\nx = 1\n```\n\n<script>alert(1)</script>"),
	))
	alice, bob := newBrowser(t), newBrowser(t)
	resp, err := alice.PostForm(st.srv.URL+"/c", url.Values{"message": {"draw a chart"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/c/c") {
		t.Fatalf("POST /c = %d, Location %q", resp.StatusCode, loc)
	}
	convID := strings.TrimPrefix(loc, "/c/")
	select {
	case <-st.agent.Done(convID):
	case <-time.After(time.Minute):
		t.Fatal("turn did not finish")
	}

	resp, err = alice.Get(st.srv.URL + loc)
	if err != nil {
		t.Fatal(err)
	}
	page := body(t, resp)
	for _, want := range []string{"draw a chart", "Hello <strong>there</strong>", `class="chroma"`, `id="run-c1"`,
		`/c/` + convID + `/runs/c1/charts/0`, "tokens this message"} {
		if !strings.Contains(page, want) {
			t.Errorf("alice's page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>alert(1)") {
		t.Error("raw HTML from the model reached the page")
	}

	for _, path := range []string{loc, loc + "/events", loc + "/runs/c1/charts/0"} {
		resp, err = bob.Get(st.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("another browser: GET %s = %d, want 404", path, resp.StatusCode)
		}
	}
	resp, err = bob.PostForm(st.srv.URL+loc+"/messages", url.Values{"message": {"hi"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("another browser posting to the conversation: %d, want 404", resp.StatusCode)
	}
}

func TestCrossSitePostRefused(t *testing.T) {
	st := startHandlers(t, sm.Script(t))
	req, _ := http.NewRequest(http.MethodPost, st.srv.URL+"/c", strings.NewReader("message=hi"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	resp, err := newBrowser(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST = %d, want 403", resp.StatusCode)
	}
}

// TestChartFrame: a plotly chart is served as a sandboxed document that
// loads the local plotly.js instead of the CDN's.
func TestChartFrame(t *testing.T) {
	st := startHandlers(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{{ID: "c1", Name: "chart", Args: map[string]any{}}}}
		}),
		sm.Say("done"),
	))
	b := newBrowser(t)
	resp, err := b.PostForm(st.srv.URL+"/c", url.Values{"message": {"chart"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	<-st.agent.Done(strings.TrimPrefix(loc, "/c/"))

	resp, err = b.Get(st.srv.URL + loc + "/runs/c1/charts/0")
	if err != nil {
		t.Fatal(err)
	}
	page := body(t, resp)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox allow-scripts;") {
		t.Errorf("Content-Security-Policy = %q, want a sandboxed document", csp)
	}
	if strings.Contains(page, "cdn.plot.ly") || !strings.Contains(page, `<script src="/static/plotly.min.js">`) || !strings.Contains(page, "draw()") {
		t.Errorf("chart page:\n%s", page)
	}
	resp, err = b.Get(st.srv.URL + "/static/plotly.min.js")
	if err != nil {
		t.Fatal(err)
	}
	if js := body(t, resp); !strings.Contains(js, "/* plotly */") {
		t.Errorf("/static/plotly.min.js = %q", js)
	}

	// The event stream starts with the whole view.
	resp, err = b.Get(st.srv.URL + loc + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var first string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: ") {
			first = sc.Text()
			sc.Scan()
			if !strings.Contains(sc.Text(), `run-c1`) || !strings.Contains(sc.Text(), `"running":false`) {
				t.Errorf("sync data = %.300s", sc.Text())
			}
			break
		}
	}
	if first != "event: sync" {
		t.Errorf("first event %q, want sync", first)
	}
}

// TestAnswerStreamsToBrowser: the model's answer reaches an open page as it
// is written (delta events, in order, spelling the answer), then as the
// stored message.
func TestAnswerStreamsToBrowser(t *testing.T) {
	const answer = "Here is a longer answer, streamed token by token to the page."
	listening := make(chan struct{})
	st := startHandlers(t, sm.Script(t,
		sm.Say("First."),
		sm.Handler(func(*sm.Request) sm.Reply {
			<-listening
			return sm.Reply{Text: answer}
		}),
	))
	b := newBrowser(t)
	resp, err := b.PostForm(st.srv.URL+"/c", url.Values{"message": {"hello"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	convID := strings.TrimPrefix(loc, "/c/")
	select {
	case <-st.agent.Done(convID):
	case <-time.After(time.Minute):
		t.Fatal("first turn did not finish")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", st.srv.URL+loc+"/events", nil)
	events, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	sc := bufio.NewScanner(events.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	next := func() (string, string) {
		var name string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && name != "":
				return name, strings.TrimPrefix(line, "data: ")
			}
		}
		t.Fatalf("event stream ended: %v", sc.Err())
		return "", ""
	}
	if name, _ := next(); name != "sync" {
		t.Fatalf("first event %q, want sync", name)
	}
	resp, err = b.PostForm(st.srv.URL+loc+"/messages", url.Values{"message": {"more"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	close(listening)
	var streamed strings.Builder
	deltas := 0
	for {
		name, data := next()
		if name == "delta" {
			var d struct{ Text string }
			if err := json.Unmarshal([]byte(data), &d); err != nil {
				t.Fatal(err)
			}
			streamed.WriteString(d.Text)
			deltas++
		}
		if name == "item" && strings.Contains(data, "token by token") {
			break
		}
	}
	if deltas < 2 || streamed.String() != answer {
		t.Errorf("%d delta events spelling %q; want several spelling %q", deltas, streamed.String(), answer)
	}
}

// TestEmbeddedPlotly: without --plotly-js the binary serves its own
// plotly.js (so charts draw offline), and the chart page says so if a
// chart does not draw.
func TestEmbeddedPlotly(t *testing.T) {
	st := startHandlersPlotly(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{{ID: "c1", Name: "chart", Args: map[string]any{}}}}
		}),
		sm.Say("done"),
	), "")
	b := newBrowser(t)
	resp, err := b.Get(st.srv.URL + "/static/plotly.min.js")
	if err != nil {
		t.Fatal(err)
	}
	if js := body(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(js[:min(len(js), 200)], "plotly.js v4.1.2") || len(js) < 1<<20 {
		t.Errorf("/static/plotly.min.js: %d, %d bytes", resp.StatusCode, len(js))
	}
	resp, err = b.PostForm(st.srv.URL+"/c", url.Values{"message": {"chart"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	<-st.agent.Done(strings.TrimPrefix(loc, "/c/"))
	resp, err = b.Get(st.srv.URL + loc + "/runs/c1/charts/0")
	if err != nil {
		t.Fatal(err)
	}
	if page := body(t, resp); !strings.Contains(page, "plotly-fallback") || strings.Contains(page, "cdn.plot.ly") {
		t.Errorf("chart page:\n%s", page)
	}
}
