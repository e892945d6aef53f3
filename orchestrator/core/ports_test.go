package core

import (
	"strings"
	"testing"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

const portsID = "sb-q3x7kd2mf5a6bnp4hcw2"

func TestPortsFrontURLs(t *testing.T) {
	for _, c := range []struct{ base, domain, want string }{
		{"http://127.0.0.1:8090", "", "http://127.0.0.1:8090/sandboxes/" + portsID + "/8080/"},
		{"https://Front.Example.com/", "", "https://front.example.com/sandboxes/" + portsID + "/8080/"},
		{"https://front.example.com", "Sandboxes.Example.com.", "https://8080-" + portsID + ".sandboxes.example.com/"},
		{"http://127.0.0.1:8090", "localhost", "http://8080-" + portsID + ".localhost:8090/"},
		{"http://[::1]:8090", "localhost", "http://8080-" + portsID + ".localhost:8090/"},
	} {
		f, err := NewPortsFront(c.base, c.domain, testSecret)
		if err != nil {
			t.Fatalf("NewPortsFront(%q, %q): %v", c.base, c.domain, err)
		}
		if got := f.URL(portsID, 8080); got != c.want {
			t.Errorf("URL under %q, %q = %q; want %q", c.base, c.domain, got, c.want)
		}
	}
	for _, c := range []struct{ base, domain string }{
		{"ftp://x", ""}, {"http://", ""}, {"http://x/path", ""}, {"http://u:p@x", ""}, {"http://x?q", ""},
		{"127.0.0.1:8090", ""}, {"http://x", "bad_domain.com"}, {"http://x", "-a.com"}, {"http://x", "a..b"},
	} {
		if _, err := NewPortsFront(c.base, c.domain, testSecret); err == nil {
			t.Errorf("NewPortsFront(%q, %q) accepted", c.base, c.domain)
		}
	}
	if _, err := NewPortsFront("http://x", "", []byte("short")); err == nil {
		t.Error("a short secret was accepted")
	}
}

func TestPortsFrontParse(t *testing.T) {
	f, _ := NewPortsFront("https://front.example.com", "sandboxes.example.com", testSecret)
	id, port, ok := f.ParseHost("8080-" + portsID + ".Sandboxes.Example.com:443")
	if !ok || id != portsID || port != 8080 {
		t.Errorf("ParseHost = %q %d %v", id, port, ok)
	}
	for _, h := range []string{
		"8080-" + portsID + ".other.com", "8080-" + portsID, "front.example.com", "0-" + portsID + ".sandboxes.example.com",
		"08080-" + portsID + ".sandboxes.example.com", "+80-" + portsID + ".sandboxes.example.com", "65536-" + portsID + ".sandboxes.example.com",
		"8080-sb-short.sandboxes.example.com", "x.8080-" + portsID + ".sandboxes.example.com", "",
	} {
		if _, _, ok := f.ParseHost(h); ok {
			t.Errorf("ParseHost(%q) accepted", h)
		}
	}
	// Without a domain, the first label under any domain (E2B's getHost).
	nod, _ := NewPortsFront("http://127.0.0.1:8090", "", testSecret)
	if id, port, ok := nod.ParseHost("3000-" + portsID + ".e2b.app"); !ok || id != portsID || port != 3000 {
		t.Errorf("ParseHost without a domain = %q %d %v", id, port, ok)
	}
	if _, _, ok := nod.ParseHost("127.0.0.1:8090"); ok {
		t.Error("the front's own address parsed as a port's")
	}

	for _, c := range []struct {
		path, rest string
		ok         bool
	}{
		{"/sandboxes/" + portsID + "/8080", "", true},
		{"/sandboxes/" + portsID + "/8080/", "/", true},
		{"/sandboxes/" + portsID + "/8080/a/b?c", "/a/b?c", true},
		{"/sandboxes/" + portsID + "/08080/", "", false},
		{"/sandboxes/" + portsID + "/", "", false},
		{"/sandboxes/" + portsID, "", false},
		{"/sandboxes/sb-x/80/", "", false},
		{"/other/" + portsID + "/80/", "", false},
	} {
		id, port, rest, ok := ParsePath(c.path)
		if ok != c.ok || (ok && (id != portsID || port != 8080 || rest != c.rest)) {
			t.Errorf("ParsePath(%q) = %q %d %q %v", c.path, id, port, rest, ok)
		}
	}
}

func TestTrafficTokens(t *testing.T) {
	f, _ := NewPortsFront("http://127.0.0.1:8090", "", testSecret)
	tok := f.Token(portsID)
	if len(tok) != 64 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Errorf("token %q: want 64 hex digits", tok)
	}
	if !f.CheckToken(portsID, tok) || f.CheckToken(portsID, "") || f.CheckToken(portsID, tok[:63]) || f.CheckToken("sb-aaaaaaaaaaaaaaaaaaaa", tok) {
		t.Error("CheckToken accepts what it should not, or refuses the token")
	}
	other, _ := NewPortsFront("http://127.0.0.1:8090", "", []byte("another secret, 32 bytes long..."))
	if other.CheckToken(portsID, tok) {
		t.Error("a token of another secret is accepted")
	}
}

func TestPortsFrontHost(t *testing.T) {
	f, _ := NewPortsFront("http://127.0.0.1:8090", "", testSecret)
	h, err := f.Host(portsID, 8000, false)
	if err != nil || h.URL != f.URL(portsID, 8000) || !h.TokenRequired || h.Token != f.Token(portsID) || h.TokenHeader != TrafficTokenHeader {
		t.Errorf("private port: %+v, %v", h, err)
	}
	if h, err = f.Host(portsID, 8000, true); err != nil || h.TokenRequired || h.Token != "" || h.URL == "" {
		t.Errorf("public port: %+v, %v (want no token)", h, err)
	}
	var off *PortsFront
	if _, err := off.Host(portsID, 8000, false); ClassOf(err) != ErrFailedPrecondition || !strings.Contains(err.Error(), "--ports-listen") {
		t.Errorf("without a front: %v, want FAILED_PRECONDITION naming --ports-listen", err)
	}
}
