package iosidecar

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/ioproto"
)

// An event whose artifacts hold bytes that JSON escapes (control bytes take
// six bytes each, invalid UTF-8 six per byte as \ufffd) still reaches the
// client: the sidecar's encoding of it stays under the message bound.
// (e2e HostileIO/refs-blowup on Kubernetes: a forged display event naming
// one 16 MiB artifact of random bytes under nine text MIME types grew to
// more than 64 MiB of JSON; the sidecar's Send failed, or the sidecar ran
// out of memory, and the caller got UNAVAILABLE.)
func TestFollowArtifactsThatJSONInflates(t *testing.T) {
	random := make([]byte, 16<<20)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(random)
	for name, content := range map[string][]byte{
		"random":   random,
		"controls": bytes.Repeat([]byte{1}, 40<<20),
	} {
		t.Run(name, func(t *testing.T) {
			sc := startSidecar(t)
			if _, err := sc.c.Append(ctxT(t), execRec("c1", "1")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sc.io, ioproto.OutDir, "c1.2.1"), content, 0o644); err != nil {
				t.Fatal(err)
			}
			refs := map[string]string{"image/png": "c1.2.1"}
			for i := range 8 {
				refs["text/x-ref-"+string(rune('a'+i))] = "c1.2.1"
			}
			sc.writeEvents(t, "c1",
				ioproto.Event{Seq: 1, Type: ioproto.EventStarted, CommandID: "c1", Language: ioproto.LanguagePython},
				ioproto.Event{Seq: 2, Type: ioproto.EventDisplay, Data: map[string]string{"text/plain": "x"}, Refs: refs},
				ioproto.Event{Seq: 3, Type: ioproto.EventDone, Status: ioproto.StatusOK})
			got, err := collect(t, sc.c, "c1", 0)
			if err != nil || len(got) != 3 {
				t.Fatalf("Follow: %d events, %v; want all 3", len(got), err)
			}
			values := 0
			for mime, v := range got[1].Data {
				if !utf8.ValidString(v) {
					t.Errorf("value of %s is not valid UTF-8", mime)
				}
				if strings.HasPrefix(mime, "text/x-ref-") {
					values++
				}
			}
			if got[1].Data["text/plain"] != "x" {
				t.Errorf("the event's own text/plain = %q; want it kept", got[1].Data["text/plain"])
			}
			t.Logf("%d of 8 text values from the artifact delivered", values)
		})
	}
}

// jsonStringLen is never less than the encoding's length.
func TestJSONStringLenBoundsTheEncoding(t *testing.T) {
	for _, s := range []string{"", "plain", "\x00\x01\b\f\n\r\t\x1f", `"\`, "<>&", "\u2028\u2029", "é中😀", strings.ToValidUTF8("a\xff\xfeb\xc3\x28", "\uFFFD")} {
		b, err := marshalEvent(&ioproto.Event{Seq: 1, Type: "x", Text: s}, 0)
		if err != nil {
			t.Fatal(err)
		}
		empty, _ := marshalEvent(&ioproto.Event{Seq: 1, Type: "x", Text: "-"}, 0)
		if got := len(b) - len(empty) + 3; jsonStringLen(s) < got {
			t.Errorf("jsonStringLen(%q) = %d; the encoding takes %d", s, jsonStringLen(s), got)
		}
	}
}
