package driver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/ioproto"
)

func TestOutputCap(t *testing.T) {
	dir := t.TempDir()
	d := &Driver{cfg: Config{MaxOutput: 10}}
	d.cfg.setDefaults()
	ev, err := createEvents(dir, "c1", "python", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d.emitText(ev, ioproto.EventStdout, "12345")
	d.emitText(ev, ioproto.EventStdout, "678€90") // crosses the cap inside "€"
	d.emitText(ev, ioproto.EventStderr, "more")
	d.emitBundle(ev, ioproto.EventDisplay, map[string]string{"text/plain": "figure"})
	d.emitBundle(ev, ioproto.EventResult, map[string]string{"text/plain": "42", "text/html": "<b>42</b>"})
	ev.close()

	data, _ := os.ReadFile(filepath.Join(dir, "c1.events"))
	var out, errText string
	var results []ioproto.Event
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		e, err := ioproto.ParseEvent([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case ioproto.EventStdout:
			out += e.Text
		case ioproto.EventStderr:
			errText += e.Text
		case ioproto.EventDisplay:
			t.Errorf("a display past the cap was emitted: %+v", e)
		case ioproto.EventResult:
			results = append(results, e)
		}
	}
	if out != "12345678" {
		t.Errorf("stdout = %q, want the first 8 bytes (the cut must not split a character)", out)
	}
	if !strings.Contains(errText, "output truncated") || strings.Contains(errText, "more") {
		t.Errorf("stderr = %q, want only the truncation notice", errText)
	}
	if len(results) != 1 || results[0].Data["text/plain"] != "42" || results[0].Data["text/html"] != "" {
		t.Errorf("the result should survive as text/plain only: %+v", results)
	}
	if reason := outputTruncation(ev, d.cfg.MaxOutput); !strings.Contains(reason, "10 bytes limit") {
		t.Errorf("done reason = %q", reason)
	}
}
