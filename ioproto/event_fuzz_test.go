package ioproto

import (
	"bytes"
	"testing"
)

// FuzzParseEvent: an events file is written by the driver, which runs as
// the sandboxed user, so the host must take any line as input. No line may
// crash ParseEvent; an accepted event has a seq and a type; and encoding is
// canonical: an accepted event encodes to one line (no raw newline inside)
// that parses back to an event with the same encoding.
func FuzzParseEvent(f *testing.F) {
	for _, seed := range []string{
		`{"seq":1,"type":"started","command_id":"c1","language":"python","time":"2026-11-21T07:30:00.123456789Z"}`,
		`{"seq":2,"type":"stdout","text":"hello\n"}`,
		`{"seq":3,"type":"stderr","text":"warning: \u00e9\n"}`,
		`{"seq":4,"type":"display","data":{"text/plain":"<Figure>","image/png":"iVBORw0KGgo="},"refs":{"image/png":"c1.4.1"}}`,
		`{"seq":5,"type":"result","data":{"text/plain":"42"}}`,
		`{"seq":6,"type":"error","ename":"NameError","evalue":"name 'y' is not defined","traceback":["Traceback (most recent call last):\n"]}`,
		`{"seq":7,"type":"done","status":"error","duration_ms":12,"state_lost":true,"reason":"killed","exit_code":3,"time":"2026-11-21T07:30:00+01:00","files":[{"path":"out.csv","size":120}]}`,
		`{"seq":0,"type":"stdout"}`,
		`{"seq":1}`,
		`{"seq":1,"type":"stdout","text":"\xff\xfe"}`,
		`{"seq":9223372036854775807,"type":"done","exit_code":-1}`,
		`{"seq":1,"type":"done","time":"0000-01-01T00:00:00-23:59"}`,
		`{"seq":1,"type":"x","data":{"":""},"refs":null,"files":[null]}`,
		`[]`,
		`null`,
		`{"seq":1,"type":"stdout","text":"a"`,
		"{\"seq\":1,\"type\":\"stdout\",\"text\":\"\u2028\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := ParseEvent(line)
		if err != nil {
			if ev.Seq != 0 || ev.Type != "" {
				t.Fatalf("a rejected line returned an event: %+v (%v)", ev, err)
			}
			return
		}
		if ev.Seq < 1 || ev.Type == "" {
			t.Fatalf("accepted an event without seq or type: %+v", ev)
		}
		enc, err := EncodeEvent(&ev)
		if err != nil {
			t.Fatalf("an accepted event does not encode: %+v: %v", ev, err)
		}
		if !bytes.HasSuffix(enc, []byte("\n")) || bytes.Count(enc, []byte("\n")) != 1 {
			t.Fatalf("an event encodes to more or less than one line: %q", enc)
		}
		again, err := ParseEvent(enc[:len(enc)-1])
		if err != nil {
			t.Fatalf("an encoded event does not parse: %q: %v", enc, err)
		}
		enc2, err := EncodeEvent(&again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("the encoding is not stable:\n%q\n%q (%v)", enc, enc2, err)
		}
	})
}
