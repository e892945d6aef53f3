package web_test

import (
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
)

// TestScreenshot renders a realistic conversation and saves a screenshot
// of the page, for the documentation. It runs only when asked:
//
//	AGENT_WEB_SCREENSHOT=$PWD/agent/docs/web-ui.png go test -run TestScreenshot ./agent/web
func TestScreenshot(t *testing.T) {
	out := os.Getenv("AGENT_WEB_SCREENSHOT")
	if out == "" {
		t.Skip("set AGENT_WEB_SCREENSHOT to the PNG to write")
	}
	dice := "import numpy as np\nimport matplotlib.pyplot as plt\n\n" +
		"rng = np.random.default_rng(7)\n" +
		"rolls = rng.integers(1, 7, size=(10_000, 2)).sum(axis=1)\n" +
		"sums, counts = np.unique(rolls, return_counts=True)\n\n" +
		"fig, ax = plt.subplots(figsize=(7, 3))\n" +
		"ax.bar(sums, counts, color=\"#10a37f\")\n" +
		"ax.set(xlabel=\"sum of two dice\", ylabel=\"rolls\", title=\"10,000 rolls of two dice\")\n" +
		"print(\"most common sum:\", sums[counts.argmax()])\n" +
		"print(\"share of 7s:\", round((rolls == 7).mean(), 3))"
	plotly := "import plotly.express as px\n" +
		"fig = px.histogram(x=rolls, nbins=11, title=\"Sum of two dice\", color_discrete_sequence=[\"#10a37f\"])\n" +
		"fig.update_layout(bargap=0.1, xaxis_title=\"sum\", yaxis_title=\"rolls\")\n" +
		"fig.show()"
	b := browser(t, 1440, 900)
	st := startStack(t, sm.Script(t,
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Text: "I'll simulate the rolls with NumPy.", Calls: []sm.Call{sm.RunCode("", "python", dice)}}
		}),
		sm.Say("The sums form the expected **triangle**, peaking at 7:\n\n"+
			"- 7 comes up about **1 in 6** rolls (6 of the 36 combinations),\n"+
			"- 2 and 12 are the rarest, at about 1 in 36 each.\n\n"+
			"The rolls are kept in `rolls`, so we can keep exploring them."),
		sm.Handler(func(*sm.Request) sm.Reply {
			return sm.Reply{Calls: []sm.Call{sm.RunCode("", "python", plotly)}}
		}),
		sm.Say("Here is an interactive version in the trace panel: hover over a bar to see its count."),
	), os.Getenv("AGENT_WEB_PLOTLY_JS"))
	const wait = 2 * time.Minute
	within(t, b, "first message", wait,
		chromedp.EmulateViewport(1440, 1000),
		chromedp.Navigate(st.url+"/"),
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "Simulate 10,000 rolls of two dice and plot the distribution of their sum"),
		chromedp.Click(chromedp.CSS(`#send`)),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run.ok .outputs img`)),
		chromedp.WaitNotPresent(chromedp.CSS(`body.running`)),
	)
	within(t, b, "second message", wait,
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "Make it interactive\r"),
		chromedp.WaitVisible(chromedp.CSS(`#trace .run-wrap:nth-of-type(2) iframe`)),
		chromedp.WaitNotPresent(chromedp.CSS(`body.running`)),
		chromedp.WaitReady(chromedp.CSS(`#trace iframe[data-loaded]`)), // the chart frame has drawn
	)
	// Show the first call's output and figure above the second's chart.
	get(t, b, "scrolling the trace", chromedp.Evaluate[int](
		`(() => { const tr = document.getElementById('trace'); tr.scrollTop = tr.querySelector('.run .console').offsetTop - tr.offsetTop - 8; return tr.scrollTop; })()`))
	png := get(t, b, "screenshot", chromedp.CaptureScreenshot())
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
