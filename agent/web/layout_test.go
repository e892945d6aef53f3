package web_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
)

// offline makes the browser resolve no host but the test's own (127.0.0.1),
// as on a machine without internet: plotly's CDN is unreachable.
var offline = chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")

// layoutWidths are the window sizes checked: a phone, a small laptop (the
// size that used to lose the chat column), a laptop and a desktop.
var layoutWidths = []struct{ w, h int64 }{{390, 844}, {1024, 768}, {1280, 800}, {1600, 900}}

const barCode = "import plotly.express as px\n" +
	"fig = px.bar(x=['a', 'b', 'c', 'd'], y=[3, 1, 4, 1], title='Letters')\n" +
	"fig.show()"

// TestBrowserLayout: at each width, in a browser without internet, the
// composer and the last message are visible and usable, a figure's
// thumbnail in the chat opens full size, and a plotly chart (from the
// sandbox image's plotly.py) draws its bars with the plotly.js the binary
// serves. With AGENT_WEB_SCREENSHOTS=dir, a screenshot per width is saved
// there (agent/docs/ holds the committed ones).
func TestBrowserLayout(t *testing.T) {
	b := browser(t, 1600, 900, offline)
	longLine := "print('" + strings.Repeat("a long line of output that must wrap ", 6) + "')\n"
	st := startStack(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Text: "I'll plot the squares.", Calls: []sm.Call{sm.RunCode("plot", "python", plotCode+"\n"+longLine)}}
		}),
		sm.Say("Here is the chart of the **squares**."),
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("bars", "python", barCode)}}
		}),
		sm.Say("The interactive bar chart is in the trace panel.\n\n| letter | count |\n|---|---|\n| a | 3 |\n| c | 4 |"),
	), "")
	const wait = 2 * time.Minute
	within(t, b, "first message", wait,
		chromedp.Navigate(st.url+"/"),
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "Plot the squares of 1 to 5"),
		chromedp.Click(chromedp.CSS(`#send`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat .figs .thumb img`)),
		chromedp.WaitNotPresent(chromedp.CSS(`body.running`)),
	)
	within(t, b, "second message", wait,
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "Now a bar chart of letters\r"),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run-wrap:nth-of-type(2) .run.ok iframe`)),
		chromedp.WaitVisible(chromedp.CSS(`#chat .msg.assistant:last-child table`)),
		chromedp.WaitNotPresent(chromedp.CSS(`body.running`)),
	)
	convURL := get(t, b, "conversation URL", chromedp.Evaluate[string](`location.href`))
	if n := count(t, b, "#chat .chip.ok"); n != 2 {
		t.Errorf("%d chips say ok, want 2", n)
	}
	if n := count(t, b, "#trace .turn-sep"); n != 2 {
		t.Errorf("%d turn separators in the trace, want 2", n)
	}

	// The chart on its own: drawn by the binary's plotly.js, offline.
	chartURL := get(t, b, "chart URL", chromedp.Evaluate[string](`document.querySelector('#trace iframe').src`))
	within(t, b, "opening the chart", wait,
		chromedp.Navigate(chartURL),
		chromedp.WaitReady(chromedp.CSS(`body`)),
	)
	drawn := get(t, b, "chart state", chromedp.Evaluate[string](`new Promise((ok) => {
		const check = (n) => {
			const bars = document.querySelectorAll('.js-plotly-plot .main-svg .bars .point path').length;
			const failed = !document.getElementById('plotly-fallback').hidden;
			if (bars > 0 || failed || n > 100) ok('bars=' + bars + ' fallback=' + failed);
			else setTimeout(() => check(n + 1), 50);
		};
		check(0);
	})`, chromedp.EvalAwaitPromise))
	if drawn != "bars=4 fallback=false" {
		t.Errorf("the plotly chart, offline: %s; want its 4 bars drawn", drawn)
	}

	for _, size := range layoutWidths {
		t.Run(fmt.Sprintf("%dpx", size.w), func(t *testing.T) {
			within(t, b, "loading the conversation", wait,
				chromedp.EmulateViewport(size.w, size.h),
				chromedp.Navigate(convURL),
				chromedp.WaitVisible(chromedp.CSS(`#composer textarea`)),
				chromedp.WaitVisible(chromedp.CSS(`#chat .msg.assistant:last-child table`)),
			)
			// Visible: inside the window, with a real size, and on top (the
			// element found at its centre is itself or inside it).
			for _, sel := range []string{"#composer textarea", "#send", "#chat .msg:last-child"} {
				got := get(t, b, "visibility of "+sel, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
					const el = document.querySelector(%q);
					el.scrollIntoView({block: "nearest"});
					const r = el.getBoundingClientRect();
					if (r.width < 20 || r.height < 10) return "too small: " + r.width + "x" + r.height;
					if (r.left < 0 || r.right > innerWidth + 1 || r.top < 0 || r.bottom > innerHeight + 1) return "outside the window: " + JSON.stringify(r);
					const top = document.elementFromPoint(r.left + r.width / 2, r.top + Math.min(r.height / 2, 20));
					return el.contains(top) ? "ok" : "covered by " + (top ? top.outerHTML.slice(0, 80) : "nothing");
				})()`, sel)))
				if got != "ok" {
					t.Errorf("%s: %s", sel, got)
				}
			}
			// Usable: typing goes into the composer.
			within(t, b, "typing into the composer", 30*time.Second,
				chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "draft"),
			)
			if v := get(t, b, "composer value", chromedp.Evaluate[string](`document.querySelector('#composer textarea').value`)); v != "draft" {
				t.Errorf("the composer holds %q after typing", v)
			}
			// A thumbnail opens the figure full size, and closes.
			within(t, b, "opening a thumbnail", 30*time.Second,
				chromedp.Click(chromedp.CSS(`#chat .figs .thumb`)),
				chromedp.WaitVisible(chromedp.CSS(`#zoom[open] img`)),
			)
			if w := get(t, b, "zoomed width", chromedp.Evaluate[int](`document.querySelector('#zoom img').naturalWidth`)); w < 300 {
				t.Errorf("the zoomed figure is %d px wide", w)
			}
			if size.w <= 760 {
				// On a phone the trace is a tab away, and the composer stays.
				within(t, b, "switching to the trace tab", 30*time.Second,
					chromedp.Click(chromedp.CSS(`#zoom .close`)),
					chromedp.WaitNotPresent(chromedp.CSS(`#zoom[open]`)),
					chromedp.Click(chromedp.CSS(`#tabs .tab[data-tab="trace"]`)),
					chromedp.WaitVisible(chromedp.CSS(`#trace .run-wrap:nth-of-type(2) iframe`)),
					chromedp.WaitVisible(chromedp.CSS(`#composer textarea`)),
					chromedp.WaitNotVisible(chromedp.CSS(`#chat-col`)),
					chromedp.Click(chromedp.CSS(`#tabs .tab[data-tab="chat"]`)),
					chromedp.WaitVisible(chromedp.CSS(`#chat .msg:last-child`)),
					chromedp.Click(chromedp.CSS(`#chat .figs .thumb`)),
					chromedp.WaitVisible(chromedp.CSS(`#zoom[open] img`)),
				)
			}
			if out := os.Getenv("AGENT_WEB_SCREENSHOTS"); out != "" {
				within(t, b, "closing the zoom", 30*time.Second, chromedp.Click(chromedp.CSS(`#zoom .close`)), chromedp.WaitNotPresent(chromedp.CSS(`#zoom[open]`)))
				get(t, b, "clearing the composer", chromedp.Evaluate[string](`document.querySelector('#composer textarea').value = ''`))
				if size.w > 760 {
					// The chart frame has loaded (and so drawn: plotly draws
					// while its page loads); the trace is at its end.
					within(t, b, "waiting for the chart", time.Minute, chromedp.WaitReady(chromedp.CSS(`#trace iframe[data-loaded]`)))
				}
				png := get(t, b, "screenshot", chromedp.CaptureScreenshot())
				if err := os.WriteFile(filepath.Join(out, fmt.Sprintf("web-ui-%d.png", size.w)), png, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
