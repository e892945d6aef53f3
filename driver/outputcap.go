package driver

import (
	"fmt"

	"github.com/sandboxd/sandboxd/ioproto"
)

// The per-command output cap keeps a command that prints gigabytes from
// filling /io and from making every reader of its events hold or send
// gigabytes: past the cap, output is drained from the pipes (so the program
// does not block) and discarded, once announced with a notice on stderr.
//
// The cap counts bytes as they are stored: text and MIME values as escaped
// in the event's JSON line (a NUL byte takes six), and artifact files. A
// second bound, the command's disk limit (budget.go), also counts the event
// lines' framing, so a program that prints one byte at a time cannot make
// its events file many times the cap.

// lineOverhead bounds the bytes of an output event's line besides its text.
const lineOverhead = 64

// outputCap is the output cap of ev's command.
func (d *Driver) outputCap(ev *eventsFile) int64 {
	switch {
	case ev.lim.output > 0:
		return ev.lim.output
	case d.maxOutput > 0:
		return d.maxOutput
	}
	return d.cfg.MaxOutput
}

// room returns how many more stored bytes ev may take for an event whose
// line has the given overhead, or -1 for no bound.
func (d *Driver) room(ev *eventsFile, overhead int64) int64 {
	r := int64(-1)
	if limit := d.outputCap(ev); limit > 0 {
		r = max(limit-ev.output, 0)
	}
	if ev.lim.disk > 0 {
		dr := max(ev.lim.disk-ev.written-overhead, 0)
		if r < 0 || dr < r {
			r = dr
		}
	}
	return r
}

// emitText emits an output chunk within the command's output cap.
func (d *Driver) emitText(ev *eventsFile, stream, text string) {
	if ev.dropped > 0 || ev.ioErr != nil {
		ev.dropped += int64(len(text))
		return
	}
	size := jsonLen(text)
	if room := d.room(ev, lineOverhead); room >= 0 && size > room {
		kept := jsonPrefix(text, room)
		if kept != "" {
			ev.output += jsonLen(kept)
			d.emit(ev, &ioproto.Event{Type: stream, Text: kept})
		}
		d.truncate(ev, int64(len(text)-len(kept)))
		return
	}
	ev.output += size
	d.emit(ev, &ioproto.Event{Type: stream, Text: text})
}

// emitBundle emits a display or result within the output cap. A result is
// always emitted (its text/plain at least): it is what the caller asked for.
func (d *Driver) emitBundle(ev *eventsFile, typ string, data map[string]string) {
	var size int64
	for k, v := range data {
		// Artifacts take at most their escaped size.
		size += jsonLen(v) + int64(len(k))
	}
	room := d.room(ev, lineOverhead)
	if ev.dropped > 0 || ev.ioErr != nil || (room >= 0 && size > room) {
		if typ != ioproto.EventResult || ev.ioErr != nil {
			if ev.dropped == 0 && ev.ioErr == nil {
				d.truncate(ev, size)
			} else {
				ev.dropped += size
			}
			return
		}
		// Past the cap, a result keeps a bounded text/plain (the kernel
		// sends at most 1 MiB of it).
		plain := data["text/plain"]
		ev.dropped += max(size-int64(len(plain)), 0)
		if len(plain) > 4<<10 {
			ev.dropped += int64(len(plain) - 4<<10)
			plain = jsonPrefix(plain, 4<<10) + "…[truncated]"
		}
		data = map[string]string{"text/plain": plain}
		size = jsonLen(plain)
	}
	ev.output += size
	d.emit(ev, &ioproto.Event{Type: typ, Data: data})
}

// emitError emits an error event; past the caps it is shortened to fit
// the command's tail allowance.
func (d *Driver) emitError(ev *eventsFile, e *ioproto.Event) {
	if room := d.room(ev, lineOverhead); ev.dropped > 0 || ev.ioErr != nil || room >= 0 && room < 64<<10 {
		e.EValue = shorten(e.EValue, 4<<10)
		if n := len(e.Traceback); n > 20 {
			e.Traceback = append([]string{"…[traceback shortened]\n"}, e.Traceback[n-20:]...)
		}
		for i, l := range e.Traceback {
			e.Traceback[i] = shorten(l, 2<<10)
		}
	}
	d.emit(ev, e)
}

func shorten(s string, n int64) string {
	if int64(len(s)) <= n {
		return s
	}
	return jsonPrefix(s, n) + "…[truncated]"
}

// truncate announces, once, that the cap was reached.
func (d *Driver) truncate(ev *eventsFile, dropped int64) {
	ev.dropped += max(dropped, 1)
	d.emit(ev, &ioproto.Event{Type: ioproto.EventStderr, Text: fmt.Sprintf(
		"\n[sandbox: output truncated: this command's output passed the %s limit; the rest is discarded]\n", formatBytes(d.outputCap(ev)))})
}

// outputTruncation describes a truncation for the done event, or "".
func outputTruncation(ev *eventsFile, limit int64) string {
	if ev.dropped == 0 {
		return ""
	}
	if ev.ioErr != nil {
		return fmt.Sprintf("/io is full: output after %s was lost (%s discarded): %v", formatBytes(ev.output), formatBytes(ev.dropped), ev.ioErr)
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
