package driver

import (
	"fmt"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
)

// The per-command output cap keeps a command that prints gigabytes from
// filling /io and from making every reader of its events hold or send
// gigabytes: past the cap, output is drained from the pipes (so the program
// does not block) and discarded, once announced with a notice on stderr.

// emitText emits an output chunk within the command's output cap.
func (d *Driver) emitText(ev *eventsFile, stream, text string) {
	if ev.dropped > 0 {
		ev.dropped += int64(len(text))
		return
	}
	limit := d.cfg.MaxOutput
	if limit > 0 && ev.output+int64(len(text)) > limit {
		keep := int(limit - ev.output)
		for keep > 0 && !utf8.RuneStart(text[keep]) {
			keep--
		}
		if keep > 0 {
			d.emit(ev, &ioproto.Event{Type: stream, Text: text[:keep]})
		}
		ev.output += int64(keep)
		d.truncate(ev, int64(len(text)-keep))
		return
	}
	ev.output += int64(len(text))
	d.emit(ev, &ioproto.Event{Type: stream, Text: text})
}

// emitBundle emits a display or result within the output cap. A result is
// always emitted (its text/plain at least): it is what the caller asked for.
func (d *Driver) emitBundle(ev *eventsFile, typ string, data map[string]string) {
	var size int64
	for _, v := range data {
		size += int64(len(v))
	}
	limit := d.cfg.MaxOutput
	if limit > 0 && (ev.dropped > 0 || ev.output+size > limit) {
		if typ != ioproto.EventResult {
			if ev.dropped == 0 {
				d.truncate(ev, size)
			} else {
				ev.dropped += size
			}
			return
		}
		if plain, ok := data["text/plain"]; ok && ev.output+size > limit {
			ev.dropped += size - int64(len(plain))
			data = map[string]string{"text/plain": plain}
			size = int64(len(plain))
		}
	}
	ev.output += size
	d.emit(ev, &ioproto.Event{Type: typ, Data: data})
}

// truncate announces, once, that the cap was reached.
func (d *Driver) truncate(ev *eventsFile, dropped int64) {
	ev.dropped += max(dropped, 1)
	d.emit(ev, &ioproto.Event{Type: ioproto.EventStderr, Text: fmt.Sprintf(
		"\n[sandbox: output truncated: this command's output passed the %s limit; the rest is discarded]\n", formatBytes(d.cfg.MaxOutput))})
}

// outputTruncation describes a truncation for the done event, or "".
func outputTruncation(ev *eventsFile, limit int64) string {
	if ev.dropped == 0 {
		return ""
	}
	return fmt.Sprintf("output truncated at the %s limit (%s discarded)", formatBytes(limit), formatBytes(ev.dropped))
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
