package web_test

// The web interface in a real headless Chromium (Debian's chromium package,
// driven with chromedp), against the real agent, a real sandboxd and Docker,
// and a scripted model.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sandboxd/sandboxd/agent/internal/agenttest"
	"github.com/sandboxd/sandboxd/agent/internal/sandboxdtest"
	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/session"
	"github.com/sandboxd/sandboxd/agent/web"
	"github.com/sandboxd/sandboxd/internal/testenv"
)

// stack is the web interface served with a real agent.
type stack struct {
	url   string
	model *sm.Server
	store *session.Store
}

func startStack(t *testing.T, h sm.Handler, plotlyJS string) *stack {
	t.Helper()
	d := sandboxdtest.Start(t)
	model := sm.Start(t, h)
	a, store := agenttest.New(t, d.Addr, model.URL)
	ws, err := web.New(web.Options{Agent: a, PlotlyJS: plotlyJS})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ws)
	t.Cleanup(srv.Close)
	t.Cleanup(ws.Shutdown) // runs first: ends the event streams so Close does not wait
	return &stack{url: srv.URL, model: model, store: store}
}

// browser starts headless Chromium (with extra options, if any).
func browser(t *testing.T, width, height int, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := testenv.Chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(width, height),
	}
	opts = append(opts, extra...)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// Start the browser now (with no deadline: it lives as long as this
	// context), so a broken installation fails here, clearly.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return bctx
}

// within runs browser steps with a deadline, failing the test with what was
// being waited for and the page as it was.
func within(t *testing.T, bctx context.Context, what string, d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		hctx, hcancel := context.WithTimeout(bctx, 5*time.Second)
		html, _ := chromedp.Run(hctx, chromedp.OuterHTML(chromedp.CSS("body")))
		hcancel()
		t.Fatalf("%s: %v\npage body:\n%s", what, err, html)
	}
}

// get runs one browser action that returns a value.
func get[T any](t *testing.T, bctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

func text(t *testing.T, b context.Context, selector string) string {
	t.Helper()
	return get(t, b, "text of "+selector, chromedp.Text(chromedp.CSS(selector)))
}

func count(t *testing.T, b context.Context, selector string) int {
	t.Helper()
	return get(t, b, "counting "+selector, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", selector)))
}

const plotCode = "import matplotlib.pyplot as plt\n" +
	"squares = [n * n for n in range(1, 6)]\n" +
	"plt.plot(range(1, 6), squares, marker='o')\n" +
	"plt.title('Squares')\n" +
	"print('plotted', len(squares), 'points')"

// TestBrowserConversation: in Chromium, a message produces a tool call and
// its chart in the trace panel, live; a second message (sent without
// reloading) uses the first one's variable; after a reload the conversation
// is still there; the Stop button interrupts a running command.
func TestBrowserConversation(t *testing.T) {
	b := browser(t, 1400, 900) // first: without Chromium, skip before starting anything
	st := startStack(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply { return sm.Reply{Calls: []sm.Call{sm.RunCode("plot", "python", plotCode)}} }),
		sm.Say("Here is the chart of the **squares**."),
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("sum", "python", "print('sum:', sum(squares))")}}
		}),
		sm.Say("Their sum is 55."),
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("slow", "python", "import time\nprint('waiting', flush=True)\ntime.sleep(120)")}}
		}),
	), "")
	const wait = 2 * time.Minute

	within(t, b, "opening the home page and sending the first message", wait,
		chromedp.Navigate(st.url+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#composer textarea`)),
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "Plot the squares of 1 to 5"),
		chromedp.Click(chromedp.CSS(`#send`)),
	)
	within(t, b, "waiting for the tool call and its chart in the trace panel", wait,
		chromedp.WaitVisible(chromedp.CSS(`#trace .run .code`)),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run.ok .outputs img`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat .msg.assistant .md strong`)),
	)
	code, console, chat := text(t, b, "#trace .run .code"), text(t, b, "#trace .run .console"), text(t, b, "#chat")
	if !strings.Contains(code, "plt.plot(range(1, 6), squares") || !strings.Contains(console, "plotted 5 points") {
		t.Errorf("trace shows code %q and output %q", code, console)
	}
	// Loaded (lazily, once visible) or failed: whichever comes first.
	if w := get(t, b, "image width", chromedp.Evaluate[int](`new Promise((ok) => {
		const img = document.querySelector('#trace .run img');
		if (img.complete && img.naturalWidth > 0) return ok(img.naturalWidth);
		img.addEventListener('load', () => ok(img.naturalWidth));
		img.addEventListener('error', () => ok(0));
		img.scrollIntoView();
	})`, chromedp.EvalAwaitPromise)); w == 0 {
		t.Error("the chart image did not load")
	}
	if !strings.Contains(chat, "Plot the squares of 1 to 5") || !strings.Contains(chat, "Here is the chart of the squares.") {
		t.Errorf("chat shows %q", chat)
	}

	// The second message goes through the page's script (no reload) and
	// its progress arrives through server-sent events.
	within(t, b, "sending the second message with Enter", wait,
		chromedp.WaitNotPresent(chromedp.CSS(`body.running`)),
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "And their sum?\r"),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run-wrap:nth-of-type(2) .run.ok`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat .msg.assistant:last-child .md`)),
		chromedp.WaitNotPresent(chromedp.CSS(`body.running`)),
	)
	chat, console = text(t, b, "#chat"), text(t, b, "#trace .run-wrap:nth-of-type(2) .console")
	if !strings.Contains(chat, "Their sum is 55.") || !strings.Contains(console, "sum: 55") {
		t.Errorf("after the second message: chat %q, output %q", chat, console)
	}
	if usage := text(t, b, "#usage"); !strings.Contains(usage, "tokens this message") || strings.HasPrefix(strings.TrimSpace(usage), "0 ") {
		t.Errorf("token counter shows %q", usage)
	}

	// After a reload, everything is still there.
	within(t, b, "reloading", wait,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run .outputs img`)),
	)
	runs, images, msgs := count(t, b, "#trace .run"), count(t, b, "#trace .run img"), count(t, b, "#chat .msg.user, #chat .msg.assistant .md")
	if runs != 2 || images != 1 || msgs != 4 {
		t.Errorf("after reload: %d runs, %d images, %d messages; want 2, 1 and 4", runs, images, msgs)
	}
	if chat = text(t, b, "#chat"); !strings.Contains(chat, "Plot the squares of 1 to 5") || !strings.Contains(chat, "Their sum is 55.") {
		t.Errorf("after reload the chat shows %q", chat)
	}

	// The Stop button interrupts a running command.
	within(t, b, "stopping a running command", wait,
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "Wait two minutes\r"),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run-wrap:nth-of-type(3) .console .stdout`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat .chip.running[data-call="slow"]`)), // the chip's live status
		chromedp.Click(chromedp.CSS(`#stop`)),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run-wrap:nth-of-type(3) .run.interrupted`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat .chip.interrupted[data-call="slow"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat .msg.notice`)),
		chromedp.WaitNotPresent(chromedp.CSS(`body.running`)),
	)
	if notice := text(t, b, "#chat .msg.notice"); notice != "Stopped." {
		t.Errorf("notice after Stop: %q", notice)
	}
	if got := len(st.model.Requests()); got != 5 {
		t.Errorf("the model was called %d times, want 5 (none after Stop)", got)
	}
}
