package iosidecar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
)

// maxEventJSON bounds one event as the sidecar encodes it: iolog's 40
// MiB of artifact values (base64 passes JSON unchanged) and the event's
// line, under MaxSendMsgSize. The sidecar holds an event's values, its JSON
// and the message the JSON is copied into while it sends it: about 140 MiB
// at most, under the sidecar's 256 MiB (its GOMEMLIMIT 192 MiB, pod.go).
const maxEventJSON = 48 << 20

// encodeEvent encodes ev for the wire as one JSON object of at most limit
// bytes. iolog bounds the values an event gets from artifacts (40 MiB as
// delivered), not their JSON: a control byte takes six bytes as JSON and
// an invalid UTF-8 byte six (\ufffd), so a sandbox's artifact of 16 MiB of
// random bytes under a few text MIME types, or of 40 MiB of control bytes,
// encodes to more than the 64 MiB a message may carry (the Send fails, and
// the buffers alone exceed the sidecar's memory limit). So the values are
// made valid UTF-8 first, each run of invalid bytes one U+FFFD (what
// sandboxd's gRPC door does to every string it sends), HTML characters
// are not escaped, and if the event would still exceed limit its largest
// MIME values are left out, as iolog leaves out artifacts over its budget,
// each counted and logged. The encoded size is reckoned before encoding,
// so the buffer is made once, at its size.
func encodeEvent(ev ioproto.Event, limit int, log *slog.Logger) ([]byte, error) {
	// In place: the event is iolog's, made for this send, so an invalid
	// value's original is garbage at once.
	for mime, v := range ev.Data {
		if !utf8.ValidString(v) {
			ev.Data[mime] = strings.ToValidUTF8(v, "\uFFFD")
		}
	}
	data := ev.Data
	ev.Data = nil
	rest, err := marshalEvent(&ev, 0)
	if err != nil {
		return nil, err
	}
	size := len(rest) + len(`,"data":{}`)
	sizes := make(map[string]int, len(data))
	for mime, v := range data {
		sizes[mime] = jsonStringLen(mime) + 1 + jsonStringLen(v) + 1
		size += sizes[mime]
	}
	for size > limit && len(data) > 0 {
		largest := ""
		for mime, n := range sizes {
			if largest == "" || n > sizes[largest] || (n == sizes[largest] && mime > largest) {
				largest = mime
			}
		}
		log.Warn("leaving a MIME value out of an event: the event would exceed the message bound", "seq", ev.Seq,
			"mime", largest, "json_bytes", sizes[largest], "limit", limit)
		size -= sizes[largest]
		delete(data, largest)
		delete(sizes, largest)
	}
	if len(data) > 0 {
		ev.Data = data
	}
	b, err := marshalEvent(&ev, size)
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, fmt.Errorf("event %d encodes to %d bytes; the limit is %d", ev.Seq, len(b), limit)
	}
	return b, nil
}

// marshalEvent is json.Marshal of ev without HTML escaping, into a buffer
// of sizeHint bytes.
func marshalEvent(ev *ioproto.Event, sizeHint int) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(sizeHint + 1)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		return nil, fmt.Errorf("encode event %d: %w", ev.Seq, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// jsonStringLen is at least the length of valid UTF-8 s as a JSON string
// by encoding/json without HTML escaping, quotes included: a control
// character is counted as six bytes (\u00XX; some take two), a quote or a
// backslash two, U+2028 and U+2029 six.
func jsonStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c < 0x20:
			n += 6
			i++
		case c == '"' || c == '\\':
			n += 2
			i++
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == '\u2028' || r == '\u2029' {
				n += 6
			} else {
				n += size
			}
			i += size
		}
	}
	return n
}
