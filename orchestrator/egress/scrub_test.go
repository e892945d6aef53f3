package egress

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// TestRuleScrubsEveryHeaderBlock: an upstream that reflects the injected
// header in every header block it can send (a 103 Early Hints, the final
// headers, an announced trailer, an unannounced one, a header's name)
// hands the sandbox none of it, whether the upstream and the sandbox's
// client would speak HTTP/2 or HTTP/1.1.
func TestRuleScrubsEveryHeaderBlock(t *testing.T) {
	const secret = "sk-echo-0123456789abcdef"
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1", true: "h2"}[h2], func(t *testing.T) {
			e := newEnv(t, Config{Bounds: allowLoopback})
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				e.record(r)
				v := r.Header.Get("X-Api-Key")
				w.Header().Set("Link", "</style.css?k="+v+">; rel=preload")
				w.Header().Set("X-Hint-"+v, "1")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Set("Trailer", "X-Echo")
				w.Header().Set("X-Final", "key="+v)
				w.WriteHeader(http.StatusOK)
				fmt.Fprintf(w, "body without the key\n")
				w.Header().Set("X-Echo", "key="+v)
				w.Header().Set(http.TrailerPrefix+"X-Late", v)
				w.Header().Set(http.TrailerPrefix+"X-"+v, "named")
			}))
			up.EnableHTTP2 = h2
			up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return e.upCA.leaf(h.ServerName) }}
			up.Config.ErrorLog = log.New(io.Discard, "", 0)
			up.StartTLS()
			t.Cleanup(up.Close)
			e.names.set("echo.egress.test", "127.0.0.1")
			port := portOf(up.Listener.Addr())

			ca := e.attach("a", srcA, core.NetworkPolicy{
				AllowOut: []string{"echo.egress.test"},
				DenyOut:  []string{"0.0.0.0/0"},
				Rules:    map[string]core.NetworkRule{"echo.egress.test": {Headers: map[string]string{"X-Api-Key": secret}}},
			})
			cl := e.client(srcA, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), ca)
			cl.Transport.(*http.Transport).ForceAttemptHTTP2 = h2

			// Everything the sandbox's client is handed, header block by
			// header block.
			var seen strings.Builder
			dump := func(what string, h http.Header) {
				for k, vs := range h {
					fmt.Fprintf(&seen, "%s %s: %s\n", what, k, strings.Join(vs, ","))
				}
			}
			interim := 0
			trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				interim++
				dump(fmt.Sprint(code), http.Header(h))
				return nil
			}}
			req, _ := http.NewRequest("GET", fmt.Sprintf("https://echo.egress.test:%d/", port), nil)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
			res, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			dump("header", res.Header)
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			dump("trailer", res.Trailer)
			t.Logf("the sandbox's client spoke %s; what it saw:\n%s", res.Proto, seen.String())

			if got := e.lastSeen().Headers.Get("X-Api-Key"); got != secret {
				t.Fatalf("upstream saw X-Api-Key %q", got)
			}
			if res.StatusCode != 200 || string(body) != "body without the key\n" {
				t.Fatalf("response %d %q", res.StatusCode, body)
			}
			// The response still arrives whole: the hint, the headers and
			// the trailers, redacted where they carried the key.
			if interim != 1 || res.Trailer.Get("X-Echo") == "" || res.Trailer.Get("X-Late") == "" || res.Header.Get("X-Final") == "" {
				t.Fatalf("a header block went missing (%d interim):\n%s", interim, seen.String())
			}
			if s := strings.ToLower(seen.String()); strings.Contains(s, strings.ToLower(secret)) {
				t.Fatalf("the sandbox saw the key:\n%s", seen.String())
			}
			if !strings.Contains(seen.String(), "[redacted by sandboxd]") {
				t.Fatalf("nothing redacted:\n%s", seen.String())
			}
		})
	}
}

func TestRedact(t *testing.T) {
	secrets := []string{"sk-abcdefgh", "Bearer XYZ12345"}
	for _, tc := range []struct{ in, want string }{
		{"none here", "none here"},
		{"k=sk-abcdefgh;k2=SK-ABCDEFGH", "k=[redacted by sandboxd];k2=[redacted by sandboxd]"},
		{"X-Sk-Abcdefgh", "X-[redacted by sandboxd]"},
		{"\xff\xfe bearer xyz12345 \xc3", "\xff\xfe [redacted by sandboxd] \xc3"},
		{"sk-abcdefg", "sk-abcdefg"},
	} {
		if got := redact(tc.in, secrets); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
