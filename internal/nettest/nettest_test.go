//go:build linux

package nettest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestInternet reaches every kind of host from the host itself: HTTP,
// HTTPS with the throwaway CA, the WebSocket echo, UDP, the metadata
// stand-in, the bridge listener; names resolve, others do not.
func TestInternet(t *testing.T) {
	in := New(t, Options{Hosts: []string{"a.test", "b.test"}, Metadata: true, Bridge: true})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: in.RootCAs}}, Timeout: 10 * time.Second}
	for name, h := range in.Hosts {
		for _, secure := range []bool{false, true} {
			scheme := "http"
			if secure {
				scheme = "https"
			}
			url := fmt.Sprintf("%s://%s/", scheme, net.JoinHostPort(h.Addr.String(), fmt.Sprint(h.Port(secure))))
			resp, err := client.Get(url)
			if err != nil {
				t.Fatalf("%s: %v", url, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := "hello from " + name; !strings.Contains(string(body), want) {
				t.Errorf("%s: %q; want %q", url, body, want)
			}
		}
		if got := h.AllAccepts(); got != 2 {
			t.Errorf("%s accepted %d connections; want 2", name, got)
		}
	}
	a := in.Hosts["a.test"]
	for n, want := range map[string]int{"0": 0, "1": 1, "200000": 200000, "-1": -1, fmt.Sprint(MaxBytes + 1): -1, "x": -1} {
		resp, err := client.Get(fmt.Sprintf("http://%s/bytes?n=%s", a.Addr, n))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			t.Errorf("/bytes?n=%s: %v", n, err)
		case want < 0 && resp.StatusCode != http.StatusBadRequest:
			t.Errorf("/bytes?n=%s: %s; want 400", n, resp.Status)
		case want >= 0 && (resp.StatusCode != http.StatusOK || len(body) != want):
			t.Errorf("/bytes?n=%s: %s, %d bytes; want %d", n, resp.Status, len(body), want)
		}
	}
	ws, _, err := websocket.Dial(ctx, fmt.Sprintf("ws://%s/ws", a.Addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "ping" {
		t.Errorf("echo %q, %v", msg, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	c, err := net.Dial("udp4", net.JoinHostPort(a.Addr.String(), fmt.Sprint(UDPPort)))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for a.UDPDatagrams() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.UDPDatagrams() != 1 {
		t.Errorf("UDP datagrams %d; want 1", a.UDPDatagrams())
	}
	if n, err := a.ICMPEchoRequests(); err != nil || n != 0 {
		t.Errorf("ICMP echo requests %d, %v; want 0", n, err)
	}
	r := in.Resolver()
	if got, err := r.LookupNetIP(ctx, "ip4", "A.test."); err != nil || len(got) != 1 || got[0] != a.Addr {
		t.Errorf("resolve a.test: %v, %v", got, err)
	}
	if _, err := r.LookupNetIP(ctx, "ip4", "example.com"); err == nil {
		t.Error("example.com resolved")
	}
	if got := in.Hosts["metadata.test"].Addr; got != MetadataAddr {
		t.Errorf("metadata at %s", got)
	}
}
